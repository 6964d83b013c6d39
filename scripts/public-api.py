#!/usr/bin/env python3
"""The public API of the library crates, one line per item, from the rustdoc HTML that
`make test` already builds (`cargo doc --workspace --no-deps --all-features`).

    python3 scripts/public-api.py            compare with api/<crate>.txt (`make test`)
    python3 scripts/public-api.py --bless    write api/<crate>.txt from target/doc

Each line is an item's path and its declaration as rustdoc shows it (HTML stripped, spaces
collapsed): structs with their public fields, enums with their variants and
`#[non_exhaustive]`, functions, constants, traits, type aliases, every inherent method's
signature, every trait implementation's header (auto traits and blanket impls left out), and
each module's re-exports. A change to the public surface is then a visible diff in review, and
`make test` fails until the listing is blessed with the change.
"""

import html
import os
import re
import sys

CRATES = {
    "dynamodb_exactly_once": "dynamodb-exactly-once",
    "dynamodb_exactly_once_lambda": "dynamodb-exactly-once-lambda",
}
DOC = "target/doc"
OUT = "api"

TAG = re.compile(r"<[^>]+>")
SPACE = re.compile(r"\s+")
ITEM_PAGE = re.compile(r"^(struct|enum|trait|fn|constant|type|macro|union|static|traitalias)\.(.+)\.html$")


def text(fragment):
    """Rustdoc HTML to one line of Rust."""
    fragment = re.sub(r'<a class="src[^"]*"[^>]*>.*?</a>', "", fragment)
    fragment = re.sub(r'<a [^>]*class="anchor"[^>]*>.*?</a>', "", fragment)
    line = html.unescape(TAG.sub("", fragment))
    line = SPACE.sub(" ", line).strip()
    line = line.replace("( ", "(").replace(" )", ")").replace(",)", ")")
    return line


def section(page, start_id, end_ids):
    """The HTML between the element with id `start_id` and the first of `end_ids` after it."""
    i = page.find(f'id="{start_id}"')
    if i < 0:
        return ""
    ends = [page.find(f'id="{e}"', i) for e in end_ids]
    ends = [e for e in ends if e > 0]
    return page[i:min(ends) if ends else len(page)]


def item_lines(path, page):
    lines = []
    decl = re.search(r'<pre class="rust item-decl">(.*?)</pre>', page, re.S)
    if decl:
        lines.append(f"{path}: {text(decl.group(1))}")
    inherent = section(page, "implementations-list",
                       ["trait-implementations", "synthetic-implementations", "blanket-implementations"])
    for impl in re.split(r'(?=<section id="impl-)', inherent):
        header = re.search(r'<h3 class="code-header">(.*?)</h3>', impl, re.S)
        if not header:
            continue
        for sig in re.findall(r'<section id="(?:method|associatedconstant|associatedtype)\.[^"]*"[^>]*>.*?'
                              r'<h4 class="code-header">(.*?)</h4>', impl, re.S):
            lines.append(f"{path}: {text(header.group(1))} {{ {text(sig)} }}")
    traits = section(page, "trait-implementations-list",
                     ["synthetic-implementations", "blanket-implementations"])
    for header in re.findall(r'<section id="impl-[^"]*" class="impl">.*?<h3 class="code-header">(.*?)</h3>',
                             traits, re.S):
        lines.append(f"{path}: {text(header)}")
    # Trait pages: required and provided methods.
    for sig in re.findall(r'<section id="(?:tymethod|method)\.[^"]*" class="method">.*?'
                          r'<h4 class="code-header">(.*?)</h4>', section(page, "required-methods", ["implementors"])
                          + section(page, "provided-methods", ["implementors"]), re.S):
        lines.append(f"{path}: {{ {text(sig)} }}")
    # Enum variants and struct fields are in the declaration; their docs are not API.
    return lines


def module_lines(path, page):
    lines = []
    reexports = section(page, "reexports", ["modules", "structs", "enums", "functions", "traits",
                                            "constants", "types", "macros", "statics"])
    for item in re.findall(r"<code>(.*?)</code>", reexports, re.S):
        lines.append(f"{path}: {text(item)}")
    return lines


def listing(crate):
    root = os.path.join(DOC, crate)
    lines = []
    for directory, _, files in os.walk(root):
        module = directory[len(DOC) + 1:].replace(os.sep, "::")
        for name in sorted(files):
            page_path = os.path.join(directory, name)
            if name == "index.html":
                with open(page_path, encoding="utf-8") as f:
                    lines += module_lines(module, f.read())
                continue
            m = ITEM_PAGE.match(name)
            if not m:
                continue
            with open(page_path, encoding="utf-8") as f:
                page = f.read()
            if 'http-equiv="refresh"' in page[:2000]:
                continue  # a redirect page for a re-export
            lines += item_lines(f"{module}::{m.group(2)}", page)
    return sorted(set(lines))


def main():
    bless = "--bless" in sys.argv[1:]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    failed = False
    for crate, package in CRATES.items():
        if not os.path.isdir(os.path.join(DOC, crate)):
            sys.exit(f"public-api: {DOC}/{crate} is missing: run cargo doc --workspace --no-deps --all-features")
        lines = listing(crate)
        out = os.path.join(OUT, f"{package}.txt")
        if bless:
            os.makedirs(OUT, exist_ok=True)
            with open(out, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            print(f"public-api: {out}: {len(lines)} lines")
            continue
        try:
            with open(out, encoding="utf-8") as f:
                kept = f.read().splitlines()
        except FileNotFoundError:
            kept = []
        if kept != lines:
            import difflib
            diff = list(difflib.unified_diff(kept, lines, out, "target/doc", lineterm="", n=0))
            print(f"public-api: the public API of {package} changed ({len(lines)} lines, "
                  f"{len(kept)} kept); if that is meant, run python3 scripts/public-api.py --bless "
                  "and commit the listing:", file=sys.stderr)
            for line in diff[:80]:
                print("  " + line, file=sys.stderr)
            if len(diff) > 80:
                print(f"  ... {len(diff) - 80} more lines", file=sys.stderr)
            failed = True
        else:
            print(f"public-api: {package}: {len(lines)} lines, unchanged")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
