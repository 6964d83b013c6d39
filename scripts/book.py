#!/usr/bin/env python3
"""The docs book as a website (mdBook), built from the Markdown as it lies in the repository.

    python3 scripts/book.py          stage and build into target/book/html (`make book`)
    python3 scripts/book.py --check  the same, and fail on any mdBook warning or any link of
                                     the site that leads nowhere (`make test`, when mdbook is
                                     installed: `cargo install mdbook --locked
                                     --no-default-features --features search`)

mdBook wants every page under one source directory, but the book's table of contents
(docs/SUMMARY.md) also lists pages that live beside their code (the protocol pages in
shared/dynamodb-exactly-once/docs/, README.md, ARCHITECTURE.md, CHANGELOG.md). So the pages and every file
they link to are staged in target/book/src at their repository paths (relative links then
stay right), with SUMMARY.md at its root, and book.toml points there.
"""

import html.parser
import os
import re
import shutil
import subprocess
import sys
from urllib.parse import unquote, urlparse

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
STAGE = os.path.join(ROOT, "target", "book", "src")
OUT = os.path.join(ROOT, "target", "book", "html")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def local_targets(page_rel, text):
    """Repository paths of the page's relative links (code blocks left out)."""
    for m in LINK.finditer(FENCE.sub("", text)):
        target = m.group(1)
        if not target or urlparse(target).scheme or target.startswith(("#", "/", "mailto:")):
            continue
        path = unquote(target.split("#")[0])
        if path:
            yield os.path.normpath(os.path.join(os.path.dirname(page_rel), path))


def stage():
    shutil.rmtree(STAGE, ignore_errors=True)
    os.makedirs(STAGE)
    with open(os.path.join(ROOT, "docs", "SUMMARY.md"), encoding="utf-8") as f:
        summary = f.read()
    pages = ["docs/SUMMARY.md"]
    seen = set()
    while pages:
        rel = pages.pop()
        if rel in seen or rel.startswith(".."):
            continue
        seen.add(rel)
        source = os.path.join(ROOT, rel)
        if not os.path.isfile(source):
            continue
        os.makedirs(os.path.dirname(os.path.join(STAGE, rel)), exist_ok=True)
        shutil.copyfile(source, os.path.join(STAGE, rel))
        if rel.endswith(".md"):
            with open(source, encoding="utf-8") as f:
                text = f.read()
            pages.extend(local_targets(rel, text))
            # The README is the site's first page, index.md (mdBook renders a README.md as
            # index.html but leaves links to it as README.html); the table of contents is the
            # site's sidebar, so a link to it goes to the first page too.
            here = os.path.dirname(rel) or "."
            index_link = os.path.relpath("index.md", here)
            for page in ("README.md", "docs/SUMMARY.md"):
                text = text.replace(f"]({os.path.relpath(page, here)})", f"]({index_link})")
                text = text.replace(f"]({os.path.relpath(page, here)}#", f"]({index_link}#")
            staged = "index.md" if rel == "README.md" else rel
            with open(os.path.join(STAGE, staged), "w", encoding="utf-8") as f:
                f.write(text)
            if staged != rel:
                os.remove(os.path.join(STAGE, rel))
    # SUMMARY.md at the stage's root: its links are relative to docs/.
    def staged_path(target):
        path = os.path.normpath(os.path.join("docs", target))
        return "index.md" if path == "README.md" else path

    rewritten = LINK.sub(lambda m: m.group(0).replace(m.group(1), staged_path(m.group(1)))
                         if m.group(1) else m.group(0), summary)
    with open(os.path.join(STAGE, "SUMMARY.md"), "w", encoding="utf-8") as f:
        f.write(rewritten)
    return len(seen)


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


def check_site():
    """Every relative href of the site reaches a file (and an anchor of a page)."""
    problems, parsed = [], {}

    def parse(path):
        if path not in parsed:
            links = Links()
            with open(path, encoding="utf-8") as f:
                links.feed(f.read())
            parsed[path] = links
        return parsed[path]

    for directory, _, files in os.walk(OUT):
        for name in files:
            if not name.endswith(".html") or name in ("print.html", "toc.html", "404.html"):
                continue
            page = os.path.join(directory, name)
            for href in parse(page).hrefs:
                url = urlparse(href)
                if url.scheme or href.startswith(("mailto:", "//")):
                    continue
                target = page if not url.path else os.path.normpath(
                    os.path.join(directory, unquote(url.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                rel = os.path.relpath(page, OUT)
                if not os.path.exists(target):
                    problems.append(f"{rel}: link {href} leads nowhere")
                elif url.fragment and target.endswith(".html") and \
                        unquote(url.fragment) not in parse(target).ids:
                    problems.append(f"{rel}: link {href}: no such anchor")
    return problems


def main():
    check = "--check" in sys.argv[1:]
    staged = stage()
    run = subprocess.run(["mdbook", "build", ROOT], capture_output=True, text=True)
    output = (run.stdout + run.stderr).strip()
    warnings = [line for line in output.splitlines() if " WARN " in f" {line}" or "ERROR" in line]
    if run.returncode != 0:
        print(output, file=sys.stderr)
        sys.exit("book: mdbook build failed")
    problems = check_site() if check else []
    for line in warnings + problems:
        print(f"book: {line}", file=sys.stderr)
    if check and (warnings or problems):
        sys.exit(f"book: {len(warnings)} mdBook warning(s), {len(problems)} broken link(s)")
    print(f"book: {staged} files staged, site in {os.path.relpath(OUT, ROOT)}/index.html")


if __name__ == "__main__":
    main()
