"""The engine (include/seglake) sits below the plugin: it never imports Airflow or the
plugin, and its modules import each other without a cycle (module-level imports; a
package's __init__ re-exporting its own submodules is not an edge back)."""

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "include" / "seglake"


def _modules() -> dict[str, Path]:
    out = {}
    for p in ENGINE.rglob("*.py"):
        parts = list(p.relative_to(ENGINE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _imports(tree: ast.AST, name: str, is_pkg: bool, top_only: bool):
    nodes = tree.body if top_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_pkg else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rsplit(".", 1)[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                yield base, a.name


def test_the_engine_never_imports_airflow_or_the_plugin():
    bad = []
    for name, path in _modules().items():
        for mod, _ in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", top_only=False):
            if mod.split(".")[0] in ("airflow", "seglake_airflow"):
                bad.append(f"{name} imports {mod}")
    assert not bad, bad


def test_engine_modules_import_each_other_without_a_cycle():
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for mod, attr in _imports(ast.parse(path.read_text()), name, is_pkg, top_only=True):
            target = f"{mod}.{attr}" if attr and f"{mod}.{attr}" in mods else mod
            if target in mods and target != name and not (is_pkg and target.startswith(name + ".")):
                graph[name].add(target)
    # Tarjan's strongly connected components: any with more than one module is a cycle
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)
    for v in graph:
        if v not in index:
            visit(v)
    cycles = [sorted(c) for c in sccs if len(c) > 1]
    assert not cycles, cycles
