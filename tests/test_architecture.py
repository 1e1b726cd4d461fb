"""The code's shape, read from its source with ast: every object's private state is its
own module's, and the package graph has no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("appservice", "indexer")
# Private attributes that belong to one object: reached only through `self`, in the
# module that owns it. `_db` and `_lock` are the event log's (its mixins share its
# `self`), `_col` is the Chroma store's collection.
PRIVATE = ("_db", "_lock", "_col")


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def foreign_private_access(path: Path) -> list[str]:
    """`x._db`, `x._lock`, `x._col` where x is anything but `self`: another object's
    private state (also `getattr(x, "_db")`)."""
    found, where = [], path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in PRIVATE):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_objects_db_lock_or_collection():
    found = [f for p in sources(*PACKAGES, "tests") for f in foreign_private_access(p)]
    assert found == [], "use the owner's public API:\n" + "\n".join(found)


def test_the_private_access_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("class A:\n    def f(self, log, store):\n        self._db = log._db\n"
                   "        with self.log._lock:\n            store._col.add()\n"
                   "        getattr(log, '_db')\n        self._lock = None\n")
    assert sorted(f.split(": ")[1] for f in foreign_private_access(bad)) == [
        "getattr(log, '_db')", "log._db", "self.log._lock", "store._col"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports when it is imported: module-level statements
    only (an import inside a function, or under `if TYPE_CHECKING:`, runs later or
    never, so it cannot close a cycle at import time)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x`
    return {m for m in out if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = sources(*PACKAGES)
    modules = {module_name(p) for p in paths}
    return {module_name(p): module_imports(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u: str) -> None:
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == "open":
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in sorted(graph):
        if u not in state:
            visit(u)
    return found


def test_the_package_import_graph_is_acyclic():
    graph = import_graph()
    assert "indexer.store.eventlog" in graph["indexer.store.answers"]  # the graph is really read
    assert cycles(graph) == [], "\n".join(" -> ".join(c) for c in cycles(graph))


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_indexer_never_imports_mautrix():
    found = [str(p.relative_to(ROOT)) for p in sources("indexer")
             if any(isinstance(n, (ast.Import, ast.ImportFrom))
                    and any((a.name if isinstance(n, ast.Import) else n.module or "")
                            .startswith("mautrix") for a in n.names)
                    for n in ast.walk(ast.parse(p.read_text())))]
    assert found == []
