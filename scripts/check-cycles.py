"""Import cycles between the modules of a crate: fails when sibling modules use each other
(directly or through other siblings).

`use` statements (nested trees included) and inline paths starting with `crate::`, `self::`
or `super::` count; an edge between a module and its own ancestor or descendant (a parent
re-exporting its child, a child using its parent's types) does not; test code (everything
after a file's first `#[cfg(test)]`, and the files `tests.rs` / `*_tests.rs`) is left out.

Usage: python3 scripts/check-cycles.py <crate src dir>...
"""
import os
import re
import sys

USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
INLINE = re.compile(r"(?<![\w:])((?:crate|self|super)(?:::super)*::[a-z_]\w*(?:::[a-z_]\w*)*)")
PUB_USE = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", re.M)
TEST_FILE = re.compile(r"(?:^|_)tests?$")


def modules(root):
    """Module path (a tuple) -> file."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            found[tuple(parts)] = path
    return found


def split_tree(tree, keep_alias=False):
    """`a::{b, c::{d, e}}` -> [`a::b`, `a::c::d`, `a::c::e`]."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        return [tree if keep_alias else tree.split(" as ")[0].strip()]
    head, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    items, depth, current = [], 0, ""
    for ch in inner:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [
        p for item in items if item.strip() for p in split_tree(head + item.strip(), keep_alias)
    ]


def split_named(tree):
    """`a::{b as c, d}` -> [(`a::b`, `c`), (`a::d`, `d`)]."""
    named = []
    for raw in split_tree(tree, keep_alias=True):
        path, _, alias = raw.partition(" as ")
        path = path.strip()
        named.append((path, alias.strip() or path.split("::")[-1]))
    return named


def paths_used(source):
    source = source.split("#[cfg(test)]")[0]
    used = [p for tree in USE.findall(source) for p in split_tree(tree)]
    code = re.sub(r"//[^\n]*", "", USE.sub("", source))
    return used + INLINE.findall(code)


def target(module, path, mods, exports=None, depth=0):
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
    else:
        return None
    while parts and base + (parts[0],) in mods:
        base += (parts[0],)
        parts = parts[1:]
    origin = (exports or {}).get(base, {}).get(parts[0]) if parts else None
    if origin and depth < 8:
        found = target(base, origin, mods, exports, depth + 1)
        return base if found is None else found
    return base


def reexports(module, source):
    """Name -> path of each item a module re-exports with `pub use` (globs left out)."""
    found = {}
    for tree in PUB_USE.findall(source.split("#[cfg(test)]")[0]):
        for path, name in split_named(tree):
            if name not in ("*", "self"):
                found[name] = path
    return found


def sibling_edge(a, b):
    """The edge between the children of a's and b's closest common ancestor, if neither
    contains the other."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if i in (len(a), len(b)):
        return None
    return a[: i + 1], b[: i + 1]


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def check(root):
    mods = modules(root)
    sources = {}
    for module, path in mods.items():
        if not (module and TEST_FILE.search(module[-1])):
            with open(path, encoding="utf-8") as f:
                sources[module] = f.read()
    exports = {module: reexports(module, source) for module, source in sources.items()}
    graph, edges = {}, 0
    for module, source in sources.items():
        used = paths_used(source)
        for t in {target(module, p, mods, exports) for p in used} - {None, module}:
            edges += 1
            edge = sibling_edge(module, t)
            if edge:
                graph.setdefault(edge[0], set()).add(edge[1])
    return len(mods), edges, cycles(graph)


def main():
    failed = False
    for root in sys.argv[1:]:
        count, edges, found = check(root)
        print(f"{root}: {count} modules, {edges} module edges, {len(found)} import cycles")
        for component in found:
            failed = True
            print("  cycle:", " <-> ".join("::".join(m) for m in sorted(component)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
