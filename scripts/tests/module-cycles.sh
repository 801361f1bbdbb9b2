#!/usr/bin/env bash
# Fails if the top-level modules of a crate import each other in a circle.
#
#   bash scripts/tests/module-cycles.sh node      # the crate directory (its src/ is read)
#
# A top-level module is `src/<name>.rs` or `src/<name>/` (every file under it counts as <name>);
# lib.rs and main.rs (the crate root, which re-exports) and src/bin/ are left out. A reference
# is `crate::<name>` in code, or a name inside `use crate::{…}`. Comments, string and character
# literals and `#[cfg(test)]` modules are not read: tests may reach across, the layering is
# that of the code that ships. Prints the modules in an order where each uses only earlier
# ones, or each circle found (exit 1). python3 standard library only.
set -euo pipefail
crate="${1:?usage: $0 <crate-dir>}"
[ -d "$crate/src" ] || { echo "$crate/src: no such directory" >&2; exit 2; }
RUSTSRC_LIB="$(dirname "$0")/../lib" exec python3 - "$crate/src" <<'PY'
import os, re, sys

sys.path.insert(0, os.environ["RUSTSRC_LIB"])
from rustsrc import strip, without_tests

src = sys.argv[1]

def top_modules():
    mods = {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if os.path.isdir(path):
            if name == "bin":
                continue
            files = []
            for root, _, fs in os.walk(path):
                files += [os.path.join(root, f) for f in fs if f.endswith(".rs")]
            if files:
                mods.setdefault(name, []).extend(sorted(files))
        elif name.endswith(".rs") and name not in ("lib.rs", "main.rs"):
            mods.setdefault(name[:-3], []).append(path)
    return mods

def groups(code, start):
    """The first path segments inside the `{…}` that opens at `start`."""
    depth, i, item, names = 0, start, "", []
    while i < len(code):
        c = code[i]
        if c == "{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                names.append(item)
                break
        if depth == 1 and c == ",":
            names.append(item)
            item = ""
        elif depth >= 1:
            item += c
        i += 1
    return [re.match(r"\s*(\w*)", s).group(1) for s in names]

mods = top_modules()
edges = {m: set() for m in mods}
for mod, files in mods.items():
    for f in files:
        with open(f, encoding="utf-8") as fh:
            code = without_tests(strip(fh.read()))
        for m in re.finditer(r"(?<![\w$])crate\s*::\s*(\{|\w+)", code):
            targets = groups(code, m.start(1)) if m.group(1) == "{" else [m.group(1)]
            for t in targets:
                if t in mods and t != mod:
                    edges[mod].add(t)

# Tarjan's strongly connected components.
index, low, stack, on, sccs = {}, {}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v); on.add(v)
    for w in sorted(edges[v]):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        sccs.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted(mods):
    if v not in index:
        visit(v)

def a_cycle(comp):
    """One circle through the component's first module, as a path."""
    start, seen = comp[0], set()
    def walk(v, path):
        for w in sorted(edges[v]):
            if w == start:
                return path + [w]
            if w in comp and w not in seen:
                seen.add(w)
                if (p := walk(w, path + [w])):
                    return p
        return None
    return walk(start, [start])

bad = [c for c in sccs if len(c) > 1]
crate = os.path.basename(os.path.dirname(os.path.abspath(src)))
if bad:
    for c in bad:
        print(f"{crate}: modules in a circle: {', '.join(c)}")
        print("  for example: " + " -> ".join(a_cycle(c)))
        for v in c:
            print(f"  {v} uses " + ", ".join(sorted(edges[v] & set(c))))
    sys.exit(1)
# Tarjan emits components with their dependencies first.
order = [c[0] for c in sccs]
print(f"{crate}: no circle between its {len(mods)} top-level modules; each uses only earlier ones:")
for v in order:
    uses = ", ".join(sorted(edges[v])) or "-"
    print(f"  {v}: {uses}")
PY
