#!/usr/bin/env python3
"""The parameter tables of docs/deploy.md, written from the templates' `Parameters` (name,
default, allowed values or range or pattern, Description) between the page's markers:

    <!-- parameters: stacks/ratchet.yaml -->   what that stack alone has (or has its own way)
    <!-- parameters: shared -->                what several writer stacks declare alike
    <!-- parameters: template.yaml -->         the demo's
    <!-- end parameters -->

Usage: param-tables.py           rewrite the tables (after changing a stack; `make stacks` runs it)
       param-tables.py --check   exit 1 when a table is not what the templates give (make test)
       (--page FILE: that file instead of docs/deploy.md)
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_template import load  # noqa: E402 (the YAML loader that reads CloudFormation tags)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "deploy.md")
BLOCK = re.compile(r"(<!-- parameters: (\S+) -->\n).*?(<!-- end parameters -->)", re.S)


def cell(text):
    text = re.sub(r"\s+", " ", str(text)).strip().replace("|", "\\|")
    return re.sub(r"<[^<>`]+>", lambda m: f"`{m.group(0)}`", text)


def row(name, spec, note=""):
    default = spec.get("Default")
    default = "empty" if default in (None, "") else f"`{default}`"
    if "AllowedValues" in spec:
        allowed = ", ".join(f"`{v}`" for v in spec["AllowedValues"])
    elif "MinValue" in spec or "MaxValue" in spec:
        allowed = f"{spec.get('MinValue', '')}–{spec.get('MaxValue', '')}"
    elif "AllowedPattern" in spec:
        allowed = f"`{cell(spec['AllowedPattern'])}`"
    else:
        allowed = "any"
    return f"| `{name}` | {default} | {allowed} | {cell(spec.get('Description', ''))}{note} |\n"


def tables():
    stacks = {os.path.relpath(p, ROOT): load(p)["Parameters"]
              for p in sorted(glob.glob(os.path.join(ROOT, "stacks", "*.yaml")))}
    shared = {}
    for params in stacks.values():
        for name, spec in params.items():
            holders = [s for s, p in stacks.items() if p.get(name) == spec]
            if len(holders) > 1 and all(p.get(name) in (None, spec) for p in stacks.values()):
                shared[name] = (spec, holders)
    head = "| parameter | default | allowed | meaning |\n|---|---|---|---|\n"
    out = {"shared": head + "".join(
        row(n, spec, "" if len(h) == len(stacks) else
            f" (only {', '.join(f'`{os.path.basename(s)}`' for s in h)})")
        for n, (spec, h) in shared.items())}
    for stack, params in stacks.items():
        own = {n: s for n, s in params.items() if n not in shared}
        out[stack] = (f"{len(params)} parameters: these {len(own)} and the "
                      f"{len(params) - len(own)} [shared](#shared-parameters) ones.\n\n"
                      + head + "".join(row(n, s) for n, s in own.items()))
    out["template.yaml"] = head + "".join(
        row(n, s) for n, s in load(os.path.join(ROOT, "template.yaml"))["Parameters"].items())
    return out


def main(argv):
    page_path = argv[argv.index("--page") + 1] if "--page" in argv else PAGE
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    generated = tables()
    missing = set(generated) - set(m.group(2) for m in BLOCK.finditer(page))
    if missing:
        sys.exit(f"param-tables: docs/deploy.md has no marker for {', '.join(sorted(missing))}")
    unknown = set(m.group(2) for m in BLOCK.finditer(page)) - set(generated)
    if unknown:
        sys.exit(f"param-tables: no template for the marker(s) {', '.join(sorted(unknown))}")
    text = BLOCK.sub(lambda m: m.group(1) + generated[m.group(2)] + m.group(3), page)
    if "--check" in argv:
        if text != page:
            sys.exit("param-tables: docs/deploy.md's parameter tables differ from the templates: "
                     "run python3 scripts/param-tables.py")
        print(f"param-tables: docs/deploy.md's {len(generated)} tables are the templates'")
    elif text != page:
        with open(page_path, "w", encoding="utf-8") as f:
            f.write(text)
        print("param-tables: wrote docs/deploy.md")


if __name__ == "__main__":
    main(sys.argv[1:])
