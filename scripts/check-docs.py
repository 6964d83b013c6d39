#!/usr/bin/env python3
"""Check the documentation: README.md, ARCHITECTURE.md, CHANGELOG.md, docs/**/*.md,
shared/*/README.md and the protocol pages shared/dynamodb-exactly-once/docs/*.md.

* README.md is at most README_MAX_BYTES;
* docs/SUMMARY.md lists every page of docs/ and every protocol page (a one-line page
  `{{#include ../path}}` lists the page it includes);
* each `{{#include path}}` line of docs/ names a file, and its `path:anchor` an `ANCHOR:` in
  it (mdBook only logs a missing file, and includes nothing for a missing anchor);
* the README's first ```rust block is, character for character, the part of
  shared/dynamodb-exactly-once/examples/quickstart/main.rs between `// quickstart:start` and `// quickstart:end`;
* prose that counts the functions counts functions/; a file named in backticks exists; a test
  cited in a "pinned by" column exists; every Rust block is compiled by some crate;
* the protocol pages are also rustdoc (`#![doc = include_str!(..)]`): no relative file links
  (they do not resolve on docs.rs; the book includes them).

Left to others: links and anchors to lychee (`make test` checks the Markdown as GitHub shows
it, `make book` the built site); a `<tag>` or `[word]` outside code in a protocol page to
rustdoc's lints `invalid_html_tags` and `broken_intra_doc_links`, errors in `make test`'s docs
step (`-D warnings`), as are its rustdoc links ([`Ratchet::write`], [`x`](crate::y)).
Python 3 standard library only. Usage: check-docs.py [repository root]. Exit status 1 with
one line per problem.
"""
import difflib
import functools
import glob
import os
import re
import sys
from urllib.parse import unquote

README_MAX_BYTES = 12 * 1024

SUMMARY = "docs/SUMMARY.md"
PROTOCOL_PAGES = "shared/dynamodb-exactly-once/docs"
QUICKSTART = "shared/dynamodb-exactly-once/examples/quickstart/main.rs"
QUICKSTART_START = "// quickstart:start"
QUICKSTART_END = "// quickstart:end"

# A fenced code block: its info string and content (up to a closing fence of the same
# character, at least as long).
FENCED = re.compile(r"^ {0,3}((`|~)\2{2,})([^\n]*)\n(.*?)^ {0,3}\1\2*[ \t]*$", re.M | re.S)
# An inline code span, as Markdown reads one: a run of n backticks up to the next run of
# exactly n, within one paragraph.
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n\n).)+?(?<!`)\1(?!`)", re.S)
# [text](target) and ![alt](target); the text may hold one level of nested brackets.
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
INCLUDE_LINE = re.compile(r"^\{\{#include ([^}:]+)(?::([^}:]+))?[^}]*\}\}$", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
RUST_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*(\(\)|!)?$")


def blank(m):
    """The matched text as as many empty lines, so that line numbers stay."""
    return "\n" * m.group(0).count("\n")


class Page:
    """A Markdown file: its fenced blocks, its text with them blanked (raw_prose), and that
    with each code span replaced by `CODE` (prose)."""

    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            self.text = f.read()
        self.blocks = [(m.group(3).strip(), m.group(4)) for m in FENCED.finditer(self.text)]
        self.raw_prose = FENCED.sub(blank, self.text)
        self.prose = CODE_SPAN.sub(lambda m: "CODE" + blank(m), self.raw_prose)

    def line_of(self, offset):
        return self.prose.count("\n", 0, offset) + 1

    def rust_blocks(self):
        return [body for info, body in self.blocks if info.split(",")[0].strip() == "rust"]

    def link_targets(self):
        """(offset, target) of every link of the page, code excluded."""
        for m in INLINE_LINK.finditer(self.prose):
            yield m.start(), m.group(2).strip("<>")
        for m in REFERENCE_DEF.finditer(self.prose):
            yield m.start(), m.group(1).strip("<>")


def files_to_check(root):
    rels = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
    for pattern in ["docs/**/*.md", "shared/*/README.md", "shared/*/CHANGELOG.md",
                    f"{PROTOCOL_PAGES}/*.md"]:
        rels += sorted(glob.glob(pattern, root_dir=root, recursive=True))
    return [r.replace(os.sep, "/") for r in rels]


def check_readme_size(root, problems):
    size = os.path.getsize(os.path.join(root, "README.md"))
    if size > README_MAX_BYTES:
        problems.append(f"README.md: {size} bytes, more than {README_MAX_BYTES}: move the depth "
                        f"into docs/")
    return size


def check_summary(root, pages, problems):
    if SUMMARY not in pages:
        problems.append(f"{SUMMARY}: missing")
        return
    listed = set()
    for _, target in pages[SUMMARY].link_targets():
        path_part = target.partition("#")[0]
        if not path_part or SCHEME.match(path_part):
            continue
        rel = os.path.normpath(os.path.join("docs", unquote(path_part))).replace(os.sep, "/")
        listed.add(rel)
        # A one-line page of the book that includes a page living elsewhere lists it too.
        include = INCLUDE_LINE.fullmatch(pages[rel].text.strip()) if rel in pages else None
        if include:
            included = os.path.normpath(os.path.join(os.path.dirname(rel), include.group(1)))
            listed.add(included.replace(os.sep, "/"))
    for rel in sorted(pages):
        wanted = rel.startswith("docs/") and rel != SUMMARY or rel.startswith(PROTOCOL_PAGES + "/")
        if wanted and rel not in listed:
            page = os.path.relpath(rel, "docs") if rel.startswith("docs/") else \
                f"a page of docs/ that is {{{{#include {os.path.relpath(rel, 'docs')}}}}}"
            problems.append(f"{SUMMARY}: does not list {rel} (one line per page: "
                            f"- [Title]({page}))")


def check_includes(root, pages, problems):
    for page in pages.values():
        for m in INCLUDE_LINE.finditer(page.text) if page.rel.startswith("docs/") else ():
            path, anchor = os.path.join(root, os.path.dirname(page.rel), m.group(1)), m.group(2)
            if not os.path.isfile(path):
                problems.append(f"{page.rel}: includes {m.group(1)}, which does not exist")
            elif anchor and not anchor.isdigit() and f"ANCHOR: {anchor}" not in read(path):
                problems.append(f"{page.rel}: includes {m.group(1)}:{anchor}, an anchor it lacks")


def check_quickstart(root, pages, problems):
    with open(os.path.join(root, QUICKSTART), encoding="utf-8") as f:
        lines = f.read().split("\n")
    starts = [i for i, l in enumerate(lines) if l.strip() == QUICKSTART_START]
    ends = [i for i, l in enumerate(lines) if l.strip() == QUICKSTART_END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        problems.append(f"{QUICKSTART}: needs exactly one `{QUICKSTART_START}` line followed by "
                        f"one `{QUICKSTART_END}` line")
        return
    wanted = "\n".join(lines[starts[0] + 1:ends[0]]) + "\n"
    blocks = pages["README.md"].rust_blocks()
    if not blocks:
        problems.append(f"README.md: no ```rust block (the quickstart from {QUICKSTART})")
    elif blocks[0] != wanted:
        diff = difflib.unified_diff(wanted.splitlines(), blocks[0].splitlines(),
                                    f"{QUICKSTART} (quickstart:start..end)",
                                    "README.md (first ```rust block)", lineterm="", n=1)
        problems.append("README.md: the quickstart block differs from the marked part of "
                        f"{QUICKSTART}; copy it over:\n  " + "\n  ".join(diff))


def check_protocol_links(pages, problems):
    for page in pages.values():
        if not page.rel.startswith(PROTOCOL_PAGES + "/"):
            continue
        for offset, target in page.link_targets():
            path_part = target.partition("#")[0]
            if path_part and not SCHEME.match(target) and not RUST_PATH.match(target):
                problems.append(f"{page.rel}:{page.line_of(offset)}: relative link `{target}` in a "
                                f"protocol page: it is also rustdoc, where relative files do not "
                                f"resolve (use a rustdoc link)")


NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]
FUNCTION_COUNT = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")( ready| arm64| Lambda)? functions\b",
                            re.I)


def check_function_counts(root, pages, problems):
    """Prose that counts the ready functions counts the directories under functions/."""
    count = len(glob.glob("functions/*/Cargo.toml", root_dir=root))
    for page in pages.values():
        for m in FUNCTION_COUNT.finditer(page.prose):
            if NUMBER_WORDS.index(m.group(1).lower()) != count:
                problems.append(f"{page.rel}:{page.line_of(m.start())}: says \"{m.group(0)}\"; functions/ holds "
                                f"{count} ({NUMBER_WORDS[count]})")


FILE_NAME = re.compile(r"`([A-Za-z0-9_./-]+\.(?:rs|md|yaml|sh|py|toml|json))`")
# Files that exist only after a command the page shows.
GENERATED = (".aws-sam/", "target/")


def check_named_files(root, pages, problems):
    """A file named in backticks exists: at that path from the repository's root, or as the
    end of a path in it (`txn/lock.rs`, `source/mod.rs`)."""
    known = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "target", ".tools", ".demo", "node_modules")]
        known += [os.path.relpath(os.path.join(directory, f), root) for f in files]
    for page in pages.values():
        for m in FILE_NAME.finditer(page.raw_prose):
            name = m.group(1)[2:] if m.group(1).startswith("./") else m.group(1)
            if name.startswith(GENERATED) or "/" not in name and "." not in name:
                continue
            if not any(k == name or k.endswith("/" + name) for k in known):
                problems.append(f"{page.rel}: names `{m.group(1)}`, which is no file of the repository")


DOC_INCLUDE = re.compile(r'#!?\[doc = include_str!\("([^"]+)"\)\]')


@functools.cache
def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def check_snippets_compiled(root, pages, problems):
    """Every page with a Rust block is rustdoc of a crate (its blocks are doctests), except the
    README, whose block is examples/quickstart/main.rs (check_quickstart). Returns (compiled, total)."""
    included = set()
    for source in glob.glob(os.path.join(root, "shared", "*", "src", "**", "*.rs"), recursive=True):
        for m in DOC_INCLUDE.finditer(read(source)):
            included.add(os.path.relpath(os.path.normpath(
                os.path.join(os.path.dirname(source), m.group(1))), root))
    compiled = total = 0
    for page in pages.values():
        blocks = len(page.rust_blocks())
        total += blocks
        if page.rel == "README.md" or page.rel in included:
            compiled += blocks
        elif blocks:
            problems.append(f"{page.rel}: {blocks} Rust block(s) that no crate compiles: "
                            "include the page as rustdoc (#[cfg(doctest)] #[doc = include_str!(..)])")
    return compiled, total


# A test cited as `module::test` (or `module::sub::test`, or a unit test's `mod::tests::test`).
CITED_TEST = re.compile(r"`([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)+)`")


def check_cited_tests(root, pages, problems):
    """Every test named in the "pinned by" column of a table (the protocol pages' invariant
    and mixed-versions tables) exists: `fn <name>` in tests/<module path>.rs or under tests/<module path>/, or
    for a unit test anywhere under shared/."""
    unit_files = glob.glob(os.path.join(root, "shared", "**", "*.rs"), recursive=True)
    for page in pages.values():
        column = None  # of "pinned by" in the table the line is in; -1: none
        for number, line in enumerate(page.text.splitlines(), 1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                column = None
            elif column is None:
                column = cells.index("pinned by") if "pinned by" in cells else -1
            elif 0 <= column < len(cells):
                for path in CITED_TEST.findall(cells[column]):
                    *parts, name = path.split("::")
                    module = os.path.join(root, "tests", *parts)
                    files = glob.glob(module + ".rs") + glob.glob(os.path.join(module, "**", "*.rs"),
                                                                   recursive=True)
                    if not os.path.isdir(module) and not files:
                        files = unit_files
                    if not any(re.search(rf"\bfn {name}\b", read(f)) for f in files):
                        problems.append(f"{page.rel}:{number}: cited test `{path}` does not exist")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = []
    pages = {}
    for rel in files_to_check(root):
        if os.path.exists(os.path.join(root, rel)):
            pages[rel] = Page(root, rel)
        else:
            problems.append(f"{rel}: missing")
    size = check_readme_size(root, problems)
    check_summary(root, pages, problems)
    check_includes(root, pages, problems)
    check_quickstart(root, pages, problems)
    check_protocol_links(pages, problems)
    check_function_counts(root, pages, problems)
    check_named_files(root, pages, problems)
    check_cited_tests(root, pages, problems)
    compiled, total = check_snippets_compiled(root, pages, problems)
    for problem in problems:
        print(problem)
    summary = (f"{len(pages)} files, README {size} bytes, "
               f"{compiled} of {total} Rust snippets compiled")
    if problems:
        print(f"check-docs: {len(problems)} problem(s) in {summary}")
        return 1
    print(f"check-docs: ok ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
