"""Import cycles between the modules of a crate: fails when sibling modules use each other
(directly or through other siblings), and prints the circle.

`use` statements (nested trees included) and inline paths starting with `crate::`, `self::`
or `super::` count, as do `use` paths starting with a child module's name (2018 paths: `pub
use child::Name`), and a name a module re-exports (`pub use inner::Name`) leads on to the
module defining it; an edge between a module and its own ancestor or descendant (a parent
re-exporting its child, a child using its parent's types) does not count; test code
(everything after a file's first `#[cfg(test)]`, and the files `tests.rs` / `*_tests.rs`) is
left out. The circle is found by Python's graphlib: one per crate (fix it, run again).

Usage: python3 scripts/check-cycles.py <crate src dir>...
"""
import glob
import graphlib
import os
import re
import sys

USE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
INLINE = re.compile(r"(?<![\w:])((?:crate|self|super)(?:::super)*::[a-z_]\w*(?:::[a-z_]\w*)*)")
TEST_FILE = re.compile(r"(?:^|_)tests?$")


def modules(root):
    """Module path (a tuple) -> file."""
    found = {}
    for path in glob.glob(os.path.join(root, "**", "*.rs"), recursive=True):
        parts = tuple(os.path.relpath(path, root)[:-3].split(os.sep))
        found[parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts] = path
    return found


def use_tree(tree):
    """`a::{b as c, d::{e, f}}` -> [(`a::b`, `c`), (`a::d::e`, `e`), (`a::d::f`, `f`)]."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        path, _, alias = (part.strip() for part in tree.partition(" as "))
        return [(path, alias or path.split("::")[-1])]
    head, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner + ","):  # split at the commas outside inner braces
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            items.append(inner[start:i].strip())
            start = i + 1
    return [named for item in items if item for named in use_tree(head + item)]


def target(module, path, mods, exports, depth=0):
    """The module a path names (its longest module prefix), or None for other crates. A name
    that module re-exports (`pub use inner::Name`) leads on to the module defining it."""
    parts = path.split("::")
    if parts[0] == "crate":
        base, parts = (), parts[1:]
    elif parts[0] in ("self", "super"):
        base = module
        while parts and parts[0] in ("self", "super"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
    elif module + (parts[0],) in mods:
        base = module  # a child module, named as it is in scope (`pub use child::Name`)
    else:
        return None
    while parts and base + (parts[0],) in mods:
        base += (parts[0],)
        parts = parts[1:]
    origin = exports.get(base, {}).get(parts[0]) if parts else None
    if origin and depth < 8:
        found = target(base, origin, mods, exports, depth + 1)
        return base if found is None else found
    return base


def sibling_edge(a, b):
    """The edge between the children of a's and b's closest common ancestor, if neither
    contains the other."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if i in (len(a), len(b)):
        return None
    return a[: i + 1], b[: i + 1]


def check(root):
    """(modules, module edges, a circle of sibling modules or None)."""
    mods = modules(root)
    used, exports = {}, {}
    for module, path in mods.items():
        if module and TEST_FILE.search(module[-1]):
            continue
        with open(path, encoding="utf-8") as f:
            code = f.read().split("#[cfg(test)]")[0]
        uses = [(pub, named) for pub, tree in USE.findall(code) for named in use_tree(tree)]
        exports[module] = {name: p for pub, (p, name) in uses if pub and name not in ("*", "self")}
        used[module] = [p for _, (p, _) in uses]
        used[module] += INLINE.findall(re.sub(r"//[^\n]*", "", USE.sub("", code)))
    graph, edges = {}, 0  # a sibling -> the siblings it uses
    for module, paths in used.items():
        for t in {target(module, p, mods, exports) for p in paths} - {None, module}:
            edges += 1
            edge = sibling_edge(module, t)
            if edge:
                graph.setdefault(edge[0], set()).add(edge[1])
    try:
        graphlib.TopologicalSorter(graph).prepare()
        return len(mods), edges, None
    except graphlib.CycleError as error:
        return len(mods), edges, error.args[1]


def main():
    failed = False
    for root in sys.argv[1:]:
        count, edges, circle = check(root)
        print(f"{root}: {count} modules, {edges} module edges, {'an' if circle else 'no'} import cycle")
        if circle:
            failed = True
            # graphlib lists each node before the one that uses it: reversed, each uses the next
            print("  cycle:", " -> ".join("::".join(m) for m in reversed(circle)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
