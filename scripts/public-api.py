#!/usr/bin/env python3
"""The public API of the library crates, one line per item, from the rustdoc JSON of the docs step
of `scripts/test.sh` (by hand: `RUSTDOC=$PWD/scripts/lib/rustdoc-json RUSTDOCFLAGS="-Z unstable-options
--output-format json" cargo doc --no-deps --all-features -p dynamodb-exactly-once -p dynamodb-exactly-once-lambda`).

    python3 scripts/public-api.py [--bless]    compare with (write) api/<crate>.txt

A line is a path and a declaration (fields, variants, `#[non_exhaustive]`, signatures, trait impl
headers without auto traits and blanket impls, re-exports of items listed elsewhere); each item once,
where defined or at its public path nearest to that. `make test` fails until a change is blessed.
"""

import difflib
import json
import os
import sys

CRATES = {"dynamodb_exactly_once": "dynamodb-exactly-once",
          "dynamodb_exactly_once_lambda": "dynamodb-exactly-once-lambda"}
FORMAT_VERSION = 57  # rustdoc JSON of Rust 1.95 (`rustdoc_types::FORMAT_VERSION` 57)


def args(a):
    if not a:
        return ""
    if "parenthesized" in a:
        p = a["parenthesized"]
        return f"({', '.join(map(ty, p['inputs']))})" + (f" -> {ty(p['output'])}" if p["output"] else "")
    a = a["angle_bracketed"]
    out = [ty(x["type"]) if "type" in x else x.get("lifetime") or "_" for x in a["args"]]
    out += [c["name"] + (f" = {ty(c['binding']['equality']['type'])}" if "equality" in c["binding"]
                         else f": {bounds(c['binding']['constraint'])}") for c in a["constraints"]]
    return f"<{', '.join(out)}>" if out else ""


def bounds(bs):
    return " + ".join(b["outlives"] if "outlives" in b else {"maybe": "?"}.get(b["trait_bound"]["modifier"], "")
                      + path(b["trait_bound"]["trait"]) for b in bs)


def path(p):  # the last segment, as rustdoc shows it: how the source spells a path is not API
    return p["path"].rsplit("::", 1)[-1] + args(p["args"])


def ty(t):
    (k, v), = t.items()
    if k in ("generic", "primitive"):
        return v
    ref = k in ("borrowed_ref", "raw_pointer") and v
    return {"resolved_path": lambda: path(v),
            "borrowed_ref": lambda: f"&{ref['lifetime'] + ' ' if ref['lifetime'] else ''}"
                                    f"{'mut ' * ref['is_mutable']}{ty(ref['type'])}",
            "raw_pointer": lambda: f"*{'mut' if ref['is_mutable'] else 'const'} {ty(ref['type'])}",
            "slice": lambda: f"[{ty(v)}]",
            "array": lambda: f"[{ty(v['type'])}; {v['len']}]",
            "tuple": lambda: f"({', '.join(map(ty, v))})",
            "impl_trait": lambda: "impl " + bounds(v),
            "dyn_trait": lambda: "dyn " + " + ".join(path(p["trait"]) for p in v["traits"])
                                 + (" + " + v["lifetime"] if v["lifetime"] else ""),
            "qualified_path": lambda: (f"<{ty(v['self_type'])} as {path(v['trait'])}>" if v["trait"] and
                                       v["trait"]["path"] else ty(v["self_type"])) + "::" + v["name"],
            "function_pointer": lambda: fn_sig("fn", v["sig"])}.get(k, lambda: sys.exit(f"public-api: type {k}?"))()


def generics(g):
    ps = [p["name"] + (f": {bounds(v['bounds'])}" if v.get("bounds") else "") if k != "const"
          else f"const {p['name']}: {ty(v['type'])}"
          for p in g["params"] for k, v in p["kind"].items() if not v.get("is_synthetic")]
    wh = [f"{ty(w['bound_predicate']['type'])}: {bounds(w['bound_predicate']['bounds'])}"
          for w in g["where_predicates"] if "bound_predicate" in w]
    return (f"<{', '.join(ps)}>" if ps else ""), (" where " + ", ".join(wh) if wh else "")


def fn_sig(head, sig):
    own = {"Self": "self", "&Self": "&self", "&mut Self": "&mut self"}
    ins = ", ".join(own[ty(t)] if n == "self" and ty(t) in own else f"{n}: {ty(t)}" for n, t in sig["inputs"])
    return f"{head}({ins})" + (f" -> {ty(sig['output'])}" if sig["output"] else "")


def fn(name_, f, vis="pub "):
    h, (gp, wh) = f["header"], generics(f["generics"])
    q = "const " * h["is_const"] + "async " * h["is_async"] + "unsafe " * h["is_unsafe"]
    return fn_sig(f"{vis}{q}fn {name_}{gp}", f["sig"]) + wh


def fields(idx, kind, vis):
    """A struct's or a variant's fields: `(T, _)`, ` { pub a: T, .. }` (stripped ones `..`) or none."""
    field = lambda f: ty(idx[str(f)]["inner"]["struct_field"]) if f is not None else "_"
    if kind in ("unit", "plain"):
        return ""
    if "tuple" in kind:
        return f"({', '.join(map(field, kind['tuple']))})"
    named = kind.get("plain") or kind["struct"]
    return " { " + ", ".join([f"{vis}{idx[str(f)]['name']}: {field(f)}" for f in named["fields"]]
                             + [".."] * named["has_stripped_fields"]) + " }"


def decl(idx, item):
    (k, v), = item["inner"].items()
    n, ne = item["name"], "#[non_exhaustive] " * ("non_exhaustive" in item["attrs"])
    if k == "function":
        return fn(n, v)
    if k == "constant":
        c = v["const"]
        return f"pub const {n}: {ty(v['type'])} = {c['expr'] if c['is_literal'] else c['value'] or c['expr']}"
    if k == "type_alias":
        return f"pub type {n}{generics(v['generics'])[0]} = {ty(v['type'])}"
    gp, wh = generics(v["generics"])
    if k == "trait":
        return f"pub trait {n}{gp}" + (f": {bounds(v['bounds'])}" if v["bounds"] else "") + wh
    if k == "struct":
        return f"{ne}pub struct {n}{gp}{wh}{fields(idx, v['kind'], 'pub ')}"
    variants = [var["name"] + fields(idx, var["inner"]["variant"]["kind"], "")
                for var in (idx[str(i)] for i in v["variants"])]
    return f"{ne}pub enum {n}{gp}{wh} {{ {', '.join(variants)} }}"


def member(m, vis):
    (k, v), = m["inner"].items()
    return fn(m["name"], v, vis) if k == "function" else f"{vis}const {m['name']}: {ty(v['type'])}" \
        if k == "assoc_const" else f"type {m['name']}" + (f": {bounds(v['bounds'])}" if v["bounds"] else "")


def item_lines(idx, at, item):
    lines = [f"{at}: {decl(idx, item)}"]
    (k, v), = item["inner"].items()
    lines += [f"{at}: {{ {member(idx[str(i)], '')} }}" for i in v.get("items", []) if k == "trait"]
    for imp in (idx[str(i)]["inner"]["impl"] for i in v.get("impls", [])):
        if imp["is_synthetic"] or imp["blanket_impl"]:
            continue
        gp, wh = generics(imp["generics"])
        head = f"impl{gp} {'!' * imp['is_negative']}{path(imp['trait']) + ' for ' if imp['trait'] else ''}" \
               f"{ty(imp['for'])}{wh}"
        lines += [f"{at}: {head}"] if imp["trait"] else [
            f"{at}: {head} {{ {member(m, 'pub ')} }}" for m in (idx[str(i)] for i in imp["items"])
            if m["visibility"] == "public"]
    return lines


def listing(doc):
    idx, found, uses, lines = doc["index"], {}, [], []

    def walk(module, here):
        for i in idx[str(module)]["inner"]["module"]["items"]:
            item = idx[str(i)]
            (k, v), = item["inner"].items()
            if k == "use":
                uses.append((here, v, f"{here}::{v['name']}"))
                if str(v["id"]) in idx and not v["is_glob"]:
                    found.setdefault(v["id"], []).append(f"{here}::{v['name']}")
            elif k != "impl":
                found.setdefault(i, []).append(f"{here}::{item['name']}")
            if "module" in (idx.get(str(v.get("id") if k == "use" else i)) or {}).get("inner", {}):
                walk(v["id"] if k == "use" else i, f"{here}::{item['name'] or v['name']}")

    walk(doc["root"], idx[str(doc["root"])]["name"])
    at = {}
    for i, paths in found.items():
        home = doc["paths"][str(i)]["path"]
        at[i] = max(paths, key=lambda p: (len(os.path.commonprefix([p.split("::"), home])), -p.count("::"), p))
        if "module" not in idx[str(i)]["inner"]:
            lines += item_lines(idx, at[i], idx[str(i)])
    lines += [f"{here}: pub use {at.get(v['id'], v['source'])}{'::*' * v['is_glob']}"
              for here, v, alias in uses if at.get(v["id"]) != alias]
    return sorted(set(lines))


def main():
    if {"-h", "--help"} & set(sys.argv):
        sys.exit(print(__doc__))
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    failed = False
    for crate, package in CRATES.items():
        source, out = f"target/doc/{crate}.json", f"api/{package}.txt"
        if not os.path.exists(source):
            sys.exit(f"public-api: {source} is missing: build it as `public-api.py --help` says")
        with open(source, encoding="utf-8") as f:
            doc = json.load(f)
        if doc["format_version"] != FORMAT_VERSION:
            sys.exit(f"public-api: {source} is rustdoc JSON format {doc['format_version']}; this reads format "
                     f"{FORMAT_VERSION} only (a new toolchain?): update it along rustdoc-types' changelog")
        lines = listing(doc)
        kept = open(out, encoding="utf-8").read().splitlines() if os.path.exists(out) else []
        if "--bless" in sys.argv:
            open(out, "w", encoding="utf-8").write("\n".join(lines) + "\n")
        elif kept != lines:
            failed = True
            print(f"public-api: the public API of {package} changed; if that is meant, run python3 scripts/"
                  "public-api.py --bless and commit the listing:", file=sys.stderr)
            diff = difflib.unified_diff(kept, lines, out, source, lineterm="", n=0)
            print("\n".join("  " + line for line in list(diff)[:80]), file=sys.stderr)
        print(f"public-api: {out}: {len(lines)} lines" + " (changed)" * failed)
    sys.exit(failed)


if __name__ == "__main__":
    main()
