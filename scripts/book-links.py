#!/usr/bin/env python3
"""mdBook preprocessor (book.toml): each link of the book leads where it leads on GitHub.

Pages that live beside their code (README.md, ARCHITECTURE.md, the changelogs, the protocol
pages) reach the book through one-line pages of docs/, `{{#include ../path}}`, and their links
are written relative to where they live, as are the links of docs/ to them. mdBook keeps links
as written; this resolves each one from the file its text comes from and points it at the
book's page for that file. A link to a file that is no page of the book (code, a template)
becomes its text. mdBook calls it with `supports <renderer>`, then with the book on stdin.
"""
import json
import os
import posixpath
import re
import sys
from urllib.parse import unquote

# A link ([text](target), ![alt](target)), or a fenced code block, which is left as it is.
LINK = re.compile(r"(?P<fence>^ {0,3}(```|~~~).*?^ {0,3}\2)|(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^)\s]*)\)",
                  re.S | re.M)
INCLUDE = re.compile(r"\{\{#include ([^}:]+)\}\}")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def chapters(items):
    for item in items:
        chapter = item.get("Chapter") if isinstance(item, dict) else None
        if chapter:
            yield chapter
            yield from chapters(chapter["sub_items"])


def main():
    if len(sys.argv) > 1:
        return 0  # `supports <renderer>`: every renderer
    context, book = json.load(sys.stdin)
    src = context["config"]["book"].get("src", "src")
    # The repository path each page's text comes from, and the page that shows it.
    origin, page_of = {}, {}
    for chapter in chapters(book["items"]):
        if not chapter.get("source_path"):
            continue
        path = posixpath.join(src, chapter["source_path"])
        with open(os.path.join(context["root"], path), encoding="utf-8") as f:
            include = INCLUDE.fullmatch(f.read().strip())
        if include:
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), include.group(1)))
        origin[chapter["path"]] = path
        page_of.setdefault(path, chapter["path"])
    # The table of contents is the book's sidebar: a link to it leads to the first page.
    page_of[posixpath.join(src, "SUMMARY.md")] = next(iter(origin))

    def rewrite(chapter, text):
        here = posixpath.dirname(chapter["path"])

        def link(m):
            target = m.group(5)
            if m.group("fence") or not target or target.startswith(("#", "/")) or SCHEME.match(target):
                return m.group(0)
            path, hash_, fragment = target.partition("#")
            repo = posixpath.normpath(posixpath.join(
                posixpath.dirname(origin[chapter["path"]]), unquote(path)))
            if repo in page_of:
                book_path = page_of[repo]
            elif repo.startswith(src + "/"):
                book_path = repo[len(src) + 1:]  # a file of the book (a chart)
            else:
                return m.group(4)  # no page of the book: its text
            new = posixpath.relpath(book_path, here or ".") + hash_ + fragment
            return f"{m.group(3)}[{m.group(4)}]({new})"

        return LINK.sub(link, text)

    # An include mdBook cannot read it only logs: check-docs.py (make test) checks them.
    for chapter in chapters(book["items"]):
        if chapter["path"] in origin:
            chapter["content"] = rewrite(chapter, chapter["content"])
    json.dump(book, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
