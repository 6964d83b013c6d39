#!/usr/bin/env python3
"""Check the documentation: README.md, ARCHITECTURE.md, CHANGELOG.md, docs/**/*.md,
shared/*/README.md and the protocol pages shared/dynamodb-exactly-once/docs/*.md.

* README.md is at most README_MAX_BYTES;
* docs/SUMMARY.md lists every page of docs/ and every protocol page (a one-line page
  `{{#include ../path}}` lists the page it includes);
* the README's first ```rust block is, character for character, the part of
  shared/dynamodb-exactly-once/examples/quickstart/main.rs between `// quickstart:start` and `// quickstart:end`;
* prose that counts the functions counts functions/; a file named in backticks exists; a test
  cited in a "pinned by" column exists; every Rust block is compiled by some crate;
* the protocol pages are also rustdoc (`#![doc = include_str!(..)]`): no relative file links
  (they do not resolve on docs.rs; the book includes them), no `<tag>` and no `[word]` outside code (rustdoc reads
  them as HTML or as intra-doc links). Their rustdoc links ([`Ratchet::write`],
  [`x`](crate::y)) are left to `cargo doc`.

Links and anchors are lychee's (`make test` checks the Markdown as GitHub shows it, `make
book` the built site). Python 3 standard library only. Usage: check-docs.py [repository root]. Exit status 1 with
one line per problem.
"""
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

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# [text](target) and ![alt](target); the text may hold one level of nested brackets.
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
INCLUDE = re.compile(r"\{\{#include ([^}:]+)\}\}")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
RUST_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*(\(\)|!)?$")
HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(\s[^<>]*)?/?>")
SHORTCUT = re.compile(r"(?<![\]\\!])\[([^\[\]]+)\](?![(\[:])")
# rustdoc tries a bracketed text as an intra-doc link when, backticks removed, it is a path.
RUSTDOC_PATH_TEXT = re.compile(r"^[A-Za-z0-9_:]+$")


class Page:
    """A Markdown file: its lines with fenced code blanked, and its code spans replaced."""

    def __init__(self, root, rel):
        self.rel = rel
        self.path = os.path.join(root, rel)
        with open(self.path, encoding="utf-8") as f:
            self.text = f.read()
        self.blocks = []  # (info string, content) of fenced code blocks
        self.raw_prose = self.without_fences()
        self.code_spans = []  # (start, end) in raw_prose
        self.prose = strip_code_spans(self.raw_prose, self.code_spans)

    def without_fences(self):
        out, fence, info, body = [], None, "", []
        for line in self.text.split("\n"):
            m = FENCE.match(line)
            if fence is None and m:
                fence, info, body = m.group(1), m.group(2).strip(), []
                out.append("")
            elif fence is not None and line.strip().startswith(fence[0] * len(fence)) \
                    and set(line.strip()) == {fence[0]}:
                self.blocks.append((info, "\n".join(body) + "\n"))
                fence = None
                out.append("")
            elif fence is not None:
                body.append(line)
                out.append("")
            else:
                out.append(line)
        return "\n".join(out)

    def line_of(self, offset):
        return self.prose.count("\n", 0, offset) + 1


def strip_code_spans(text, spans):
    """Replace each inline code span with `CODE` (newlines kept), as Markdown reads them: a
    run of n backticks up to the next run of exactly n, within one paragraph. The spans'
    positions in `text` are appended to `spans`."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "`":
            out.append(text[i])
            i += 1
            continue
        j = i
        while j < len(text) and text[j] == "`":
            j += 1
        run = j - i
        close = re.compile(r"(?<!`)`{%d}(?!`)" % run).search(text, j)
        end_of_paragraph = text.find("\n\n", j)
        if close and (end_of_paragraph == -1 or close.start() < end_of_paragraph):
            span = text[i:close.end()]
            spans.append((i, close.end()))
            out.append("CODE" + "\n" * span.count("\n"))
            i = close.end()
        else:
            out.append(text[i:j])
            i = j
    return "".join(out)


def files_to_check(root):
    rels = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
    rels += sorted(glob.glob("docs/**/*.md", root_dir=root, recursive=True))
    rels += sorted(glob.glob("shared/*/README.md", root_dir=root))
    rels += sorted(glob.glob("shared/*/CHANGELOG.md", root_dir=root))
    rels += sorted(glob.glob(f"{PROTOCOL_PAGES}/*.md", root_dir=root))
    return [r.replace(os.sep, "/") for r in rels]


def link_targets(page):
    """(offset, target) of every link of the page, code excluded."""
    for m in INLINE_LINK.finditer(page.prose):
        yield m.start(), m.group(2).strip("<>")
    for m in REFERENCE_DEF.finditer(page.prose):
        yield m.start(), m.group(1).strip("<>")


def check_readme_size(root, problems):
    size = os.path.getsize(os.path.join(root, "README.md"))
    if size > README_MAX_BYTES:
        problems.append(f"README.md: {size} bytes, more than {README_MAX_BYTES}: move the depth "
                        f"into docs/")
    return size


def check_summary(root, pages, problems):
    summary = next((p for p in pages if p.rel == SUMMARY), None)
    if summary is None:
        problems.append(f"{SUMMARY}: missing")
        return
    listed = set()
    for _, target in link_targets(summary):
        path_part = target.partition("#")[0]
        if path_part and not SCHEME.match(path_part):
            rel = os.path.normpath(os.path.join(os.path.dirname(SUMMARY), unquote(path_part)))
            listed.add(rel.replace(os.sep, "/"))
            # A one-line page of the book that includes a page living elsewhere lists it too.
            page = next((p for p in pages if p.rel == rel.replace(os.sep, "/")), None)
            include = INCLUDE.fullmatch(page.text.strip()) if page else None
            if include:
                included = os.path.normpath(os.path.join(os.path.dirname(rel), include.group(1)))
                listed.add(included.replace(os.sep, "/"))
                if not os.path.isfile(os.path.join(root, included)):
                    problems.append(f"{rel}: includes {included}, which does not exist")
    wanted = [p.rel for p in pages
              if (p.rel.startswith("docs/") and p.rel != SUMMARY)
              or p.rel.startswith(PROTOCOL_PAGES + "/")]
    for rel in sorted(set(wanted)):
        if rel not in listed:
            page = os.path.relpath(rel, "docs") if rel.startswith("docs/") else \
                f"a page of docs/ that is {{{{#include {os.path.relpath(rel, 'docs')}}}}}"
            problems.append(f"{SUMMARY}: does not list {rel} (one line per page: "
                            f"- [Title]({page}))")


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
    readme = next(p for p in pages if p.rel == "README.md")
    blocks = [body for info, body in readme.blocks if info.split(",")[0].strip() == "rust"]
    if not blocks:
        problems.append(f"README.md: no ```rust block (the quickstart from {QUICKSTART})")
        return
    if blocks[0] != wanted:
        import difflib
        diff = difflib.unified_diff(wanted.splitlines(), blocks[0].splitlines(),
                                    f"{QUICKSTART} (quickstart:start..end)",
                                    "README.md (first ```rust block)", lineterm="", n=1)
        problems.append("README.md: the quickstart block differs from the marked part of "
                        f"{QUICKSTART}; copy it over:\n  " + "\n  ".join(diff))


def check_rustdoc_hazards(pages, problems):
    for page in pages:
        if not page.rel.startswith(PROTOCOL_PAGES + "/"):
            continue
        for offset, target in link_targets(page):
            path_part = target.partition("#")[0]
            if path_part and not SCHEME.match(target) and not RUST_PATH.match(target):
                problems.append(f"{page.rel}:{page.line_of(offset)}: relative link `{target}` in a "
                                f"protocol page: it is also rustdoc, where relative files do not "
                                f"resolve (use a rustdoc link)")
        for m in HTML_TAG.finditer(page.prose):
            problems.append(f"{page.rel}:{page.line_of(m.start())}: `{m.group(0)}` outside code: "
                            f"rustdoc reads it as an HTML tag (put it in backticks)")
        for m in SHORTCUT.finditer(page.raw_prose):
            text = m.group(1)
            inside_code = any(a <= m.start() < b for a, b in page.code_spans)
            if inside_code or "`" in text or not RUSTDOC_PATH_TEXT.match(text):
                continue  # code, a rustdoc link [`Path`], or text rustdoc leaves alone
            line = page.raw_prose.count("\n", 0, m.start()) + 1
            problems.append(f"{page.rel}:{line}: `[{text}]` outside code: rustdoc reads it as "
                            f"an intra-doc link (write [`{text}`] if it is one, else put it in "
                            f"backticks)")


NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]
FUNCTION_COUNT = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")( ready| arm64| Lambda)? functions\b",
                            re.I)


def check_function_counts(root, pages, problems):
    """Prose that counts the ready functions counts the directories under functions/."""
    count = len([d for d in os.listdir(os.path.join(root, "functions"))
                 if os.path.isfile(os.path.join(root, "functions", d, "Cargo.toml"))])
    for page in pages:
        for m in FUNCTION_COUNT.finditer(page.prose):
            said = NUMBER_WORDS.index(m.group(1).lower())
            if said != count:
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
    for page in pages:
        for m in FILE_NAME.finditer(page.raw_prose):
            name = m.group(1)[2:] if m.group(1).startswith("./") else m.group(1)
            if name.startswith(GENERATED) or "/" not in name and "." not in name:
                continue
            if not any(k == name or k.endswith("/" + name) for k in known):
                problems.append(f"{page.rel}: names `{m.group(1)}`, which is no file of the repository")


DOC_INCLUDE = re.compile(r'#!?\[doc = include_str!\("([^"]+)"\)\]')


def check_snippets_compiled(root, pages, problems):
    """Every page with a Rust block is rustdoc of a crate (its blocks are doctests), except the
    README, whose block is examples/quickstart/main.rs (check_quickstart). Returns (compiled, total)."""
    included = set()
    for source in glob.glob(os.path.join(root, "shared", "*", "src", "**", "*.rs"), recursive=True):
        with open(source, encoding="utf-8") as f:
            for m in DOC_INCLUDE.finditer(f.read()):
                included.add(os.path.relpath(os.path.normpath(
                    os.path.join(os.path.dirname(source), m.group(1))), root))
    compiled = total = 0
    for page in pages:
        blocks = [info for info, _ in page.blocks if info.split(",")[0].strip() == "rust"]
        if not blocks:
            continue
        total += len(blocks)
        if page.rel == "README.md" or page.rel in included:
            compiled += len(blocks)
        else:
            problems.append(f"{page.rel}: {len(blocks)} Rust block(s) that no crate compiles: "
                            "include the page as rustdoc (#[cfg(doctest)] #[doc = include_str!(..)])")
    return compiled, total


# A test cited as `module::test` (or `module::sub::test`, or a unit test's `mod::tests::test`).
CITED_TEST = re.compile(r"`([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)+)`")


def check_cited_tests(root, pages, problems):
    """Every test named in the "pinned by" column of a table (the protocol pages' invariant
    and mixed-versions tables) exists: `fn <name>` in tests/<module path>.rs or under tests/<module path>/, or
    for a unit test anywhere under shared/."""
    sources = {}

    def defines(path, name):
        if path not in sources:
            with open(path, encoding="utf-8") as f:
                sources[path] = f.read()
        return re.search(r"\bfn " + re.escape(name) + r"\b", sources[path]) is not None

    def rust_files(top):
        for dirpath, _, files in os.walk(top):
            for name in files:
                if name.endswith(".rs"):
                    yield os.path.join(dirpath, name)

    unit_files = None
    for page in pages:
        column = None
        for number, line in enumerate(page.text.splitlines(), 1):
            if not line.startswith("|"):
                column = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if column is None:
                column = cells.index("pinned by") if "pinned by" in cells else -1
                continue
            if column < 0 or column >= len(cells):
                continue
            for path in CITED_TEST.findall(cells[column]):
                parts = path.split("::")
                name = parts[-1]
                # tests/<a>/<b>.rs, tests/<a>/<b>/mod.rs, ... : the module path without the name
                module = os.path.join(root, "tests", *parts[:-1])
                if os.path.exists(module + ".rs") or os.path.isdir(module):
                    files = [module + ".rs"] if os.path.exists(module + ".rs") else []
                    files += list(rust_files(module)) if os.path.isdir(module) else []
                else:
                    if unit_files is None:
                        unit_files = list(rust_files(os.path.join(root, "shared")))
                    files = unit_files
                if not any(defines(f, name) for f in files):
                    problems.append(f"{page.rel}:{number}: cited test `{path}` does not exist")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = []
    rels = files_to_check(root)
    pages = []
    for rel in rels:
        if not os.path.exists(os.path.join(root, rel)):
            problems.append(f"{rel}: missing")
            continue
        pages.append(Page(root, rel))
    size = check_readme_size(root, problems)
    check_summary(root, pages, problems)
    check_quickstart(root, pages, problems)
    check_rustdoc_hazards(pages, problems)
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
