"""The code's shape, read from its source with ast: every object's private state is its
own module's, the package graph has no import cycle, every module sits in the package of
its job (docs/architecture.md) and the layers of indexer/ are imported downwards only."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The one installed package: module names below are relative to it (`indexer.store`), and
# an import of `matrix_sources.indexer.store` is read as that name.
ROOT = REPO / "matrix_sources"
PACKAGES = ("appservice", "indexer")
# Private attributes that belong to one object: reached only through `self`, in the
# module that owns it. `_db` and `_lock` are the event log's connection and lock, held by
# its `Database` (eventlog/db.py), which the event log's parts are given and reach
# them through (`locked()`, `transaction()`); `_segs` is the Chroma store's live
# segments, which only its compactor is given.
PRIVATE = ("_db", "_lock", "_segs")


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def foreign_private_access(path: Path) -> list[str]:
    """`x._db`, `x._lock`, `x._segs` where x is anything but `self`: another
    object's private state (also `getattr(x, "_db")`)."""
    found, where = [], path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_objects_db_lock_or_collection():
    tests = sorted((REPO / "tests").rglob("*.py"))
    found = [f for p in sources(*PACKAGES) + tests for f in foreign_private_access(p)]
    assert found == [], "use the owner's public API:\n" + "\n".join(found)


def test_the_private_access_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "class A:\n    def f(self, log, store):\n        self._db = log._db\n"
        "        with self.log._lock:\n            store._segs.hot.collection.add()\n"
        "        getattr(log, '_db')\n        self._lock = None\n"
    )
    assert sorted(f.split(": ")[1] for f in foreign_private_access(bad)) == [
        "getattr(log, '_db')",
        "log._db",
        "self.log._lock",
        "store._segs",
    ]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(
    path: Path, modules: set[str], nested: bool = False, root: Path = ROOT
) -> set[str]:
    """The package modules `path` imports when it is imported: module-level statements
    only (an import inside a function, or under `if TYPE_CHECKING:`, runs later or
    never, so it cannot close a cycle at import time). With `nested`, every import
    anywhere in the file: what it depends on at all."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree) if nested else tree.body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x`
    out = {m.removeprefix("matrix_sources.") for m in out}
    return {m for m in out if m in modules and m != name}


def import_graph(
    nested: bool = False, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES
) -> dict[str, set[str]]:
    paths = sorted(p for f in packages for p in (root / f).rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): module_imports(p, modules, nested, root) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(u: str) -> None:
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == "open":
                found.append(stack[stack.index(v) :] + [v])
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
    assert (
        "indexer.store.eventlog.log" in graph["indexer.store.answers"]
    )  # the graph is really read
    assert cycles(graph) == [], "\n".join(" -> ".join(c) for c in cycles(graph))


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_loop_at_any_depth():
    """No two modules of the product depend on each other, not even through an import
    inside a function or under TYPE_CHECKING: each one can be read knowing only what it
    imports. (indexer/'s packages cannot loop either: test_indexer_imports_down_its_layers.)"""
    graph = import_graph(nested=True, packages=("indexer", "appservice"))
    assert "indexer.models.onnx_embedder" in graph["indexer.models.embedder"]  # really read
    assert "appservice.app" in graph["appservice.tools.demo"]
    assert cycles(graph) == [], "\n".join(" -> ".join(c) for c in cycles(graph))


def test_the_loop_check_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text("def load():\n    from .backend import B\n")
    (tmp_path / "pkg" / "backend.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .model import load\n"
    )
    (tmp_path / "pkg" / "leaf.py").write_text("from . import model\n")
    graph = import_graph(nested=True, root=tmp_path, packages=("pkg",))
    assert cycles(graph) == [["pkg.backend", "pkg.model", "pkg.backend"]]
    assert cycles(import_graph(root=tmp_path, packages=("pkg",))) == []  # module level only


def foreign_imports(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    """Imports of `forbidden` packages anywhere in `path` (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [
            f"{path.name}:{node.lineno}: {n}"
            for n in names
            if any(n == f or n.startswith(f + ".") for f in forbidden)
        ]
    return found


def test_indexer_never_imports_mautrix_or_appservice():
    found = [f for p in sources("indexer") for f in foreign_imports(p, ("mautrix", "appservice"))]
    assert found == []


def test_the_foreign_import_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import mautrix.types\nfrom appservice.bot import replies\n"
        "from . import appservice\nimport mautrixish\n"
        "def f():\n    from mautrix.api import HTTPAPI\n"
    )
    assert foreign_imports(bad, ("mautrix", "appservice")) == [
        "probe.py:1: mautrix.types",
        "probe.py:2: appservice.bot",
        "probe.py:6: mautrix.api",
    ]


def test_only_the_store_holds_sql():
    """SQLite (a connection, a cursor, a statement) is the store's: in indexer/, only
    indexer/store/ imports sqlite3. Ingest hands the event log typed operations."""
    found = [
        f
        for p in sources("indexer")
        if "store" not in p.relative_to(ROOT).parts
        for f in foreign_imports(p, ("sqlite3",))
    ]
    assert found == []


def test_the_sql_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import sqlite3\ndef f(cur: 'sqlite3.Cursor'):\n    import sqlite3.dbapi2\n")
    assert foreign_imports(bad, ("sqlite3",)) == [
        "probe.py:1: sqlite3",
        "probe.py:3: sqlite3.dbapi2",
    ]


# Outgoing HTTP: mautrix's client for Matrix, appservice/httpclient.py for the service's
# own calls (aliases, the erasure check, doctor, the commands' API client, the tools).
HTTP_CLIENT = ROOT / "appservice" / "httpclient.py"
HTTP_LIBRARIES = ("urllib.request", "urllib.error", "http.client", "requests", "httpx")


def own_http_clients(path: Path) -> list[str]:
    """An HTTP client of the module's own: urllib's or http.client's imported, or an
    aiohttp client session (`ClientSession`, `aiohttp.request`) opened."""
    found = foreign_imports(path, HTTP_LIBRARIES)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else None
        )
        if name == "ClientSession" or (
            name == "request"
            and isinstance(node, ast.Attribute)
            and ast.unparse(node.value) == "aiohttp"
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "aiohttp":
            found += [
                f"{path.name}:{node.lineno}: aiohttp.{a.name}"
                for a in node.names
                if a.name in ("ClientSession", "request")
            ]
    return found


def test_one_http_client_for_the_services_own_calls():
    assert own_http_clients(HTTP_CLIENT)  # the one that may: really read
    found = [f for p in sources(*PACKAGES) if p != HTTP_CLIENT for f in own_http_clients(p)]
    assert found == [], "call through appservice/httpclient.py (Matrix: mautrix's client)"


def test_the_http_client_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import urllib.request\nimport http.client as hc\nimport aiohttp\n"
        "from aiohttp import ClientSession, web\nfrom urllib.parse import quote\n"
        "async def f():\n    from urllib.error import HTTPError\n"
        "    async with aiohttp.ClientSession() as s:\n        pass\n"
        "    await aiohttp.request('GET', 'x')\n    web.Response()\n"
    )
    assert sorted(own_http_clients(bad)) == sorted(
        [
            "probe.py:1: urllib.request",
            "probe.py:2: http.client",
            "probe.py:7: urllib.error",
            "probe.py:4: aiohttp.ClientSession",
            "probe.py:8: aiohttp.ClientSession",
            "probe.py:10: aiohttp.request",
        ]
    )


# Time: every wait, deadline and timestamp goes through the injected Clock; only
# indexer/clock.py reads the system's clocks, sleeps or sets a deadline on the event
# loop's own clock (a yield, `asyncio.sleep(0)`, is no wait).
CLOCK = ROOT / "indexer" / "clock.py"
CLOCK_READS = {
    "time": {
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "perf_counter",
        "perf_counter_ns",
        "sleep",
    },
    "asyncio": {"sleep", "timeout", "timeout_at", "wait_for"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
}


def clock_reads(path: Path) -> list[str]:
    """`time.time`, `time.monotonic`, `time.sleep`, `asyncio.sleep`, `datetime.now`...
    called or taken as a value (a default argument), or imported by name."""
    found, tree = [], ast.parse(path.read_text(), str(path))
    yields = {
        id(n.func)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n) == "asyncio.sleep(0)"
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and id(node) not in yields
            and isinstance(node.value, (ast.Name, ast.Attribute))
            and node.attr in CLOCK_READS.get(ast.unparse(node.value).rpartition(".")[2], ())
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module in CLOCK_READS and not node.level:
            found += [
                f"{path.name}:{node.lineno}: {node.module}.{a.name}"
                for a in node.names
                if a.name in CLOCK_READS[node.module]
            ]
    return found


def test_only_the_clock_reads_the_time_or_sleeps():
    assert clock_reads(CLOCK)  # the one that may: really read
    found = [f for p in sources(*PACKAGES) if p != CLOCK for f in clock_reads(p)]
    assert found == [], "take a Clock (indexer/clock.py): its now, wall, sleep"


def test_the_clock_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import time, asyncio, datetime as dt\nfrom time import monotonic\n"
        "def f(clock=time.time):\n    time.sleep(1)\n    dt.datetime.now()\n"
        "async def g():\n    await asyncio.sleep(0)\n    await asyncio.sleep(2)\n"
        "    time.strftime('%Y', time.gmtime(0))\n"
        "    async with asyncio.timeout(5):\n        pass\n"
    )
    assert sorted(clock_reads(bad)) == sorted(
        [
            "probe.py:2: time.monotonic",
            "probe.py:3: time.time",
            "probe.py:4: time.sleep",
            "probe.py:5: dt.datetime.now",
            "probe.py:8: asyncio.sleep",
            "probe.py:10: asyncio.timeout",
        ]
    )


MAX_PUBLIC_METHODS = 25


def classes(path: Path) -> list[ast.ClassDef]:
    return [
        n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.ClassDef)
    ]


def mixed_classes(path: Path) -> list[str]:
    """Classes that inherit from a class of the product: a mixin sharing `self`. A
    Protocol, an exception, or a third-party library's own extension point (a psycopg
    dumper) is no mixin."""
    external = {
        a.asname or a.name
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.ImportFrom)
        and n.level == 0
        and n.module
        and n.module.split(".")[0] not in PACKAGES
        for a in n.names
    }
    found = []
    for node in classes(path):
        bases = [ast.unparse(b) for b in node.bases]
        bases = [
            b
            for b in bases
            if b != "Protocol" and b not in external and not b.endswith(("Error", "Exception"))
        ]
        if bases:
            found.append(f"{node.name}({', '.join(bases)})")
    return found


def large_classes(path: Path) -> list[str]:
    """Classes with more than MAX_PUBLIC_METHODS public methods (properties count)."""
    found = []
    for node in classes(path):
        public = [
            f.name
            for f in node.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_")
        ]
        if len(public) > MAX_PUBLIC_METHODS:
            found.append(f"{node.name}: {len(public)} public methods")
    return found


def test_the_store_is_composed_of_parts_not_mixins():
    """The event log and the Chroma store are parts given their dependencies (the
    event log's Database, the store's Segments), never mixins sharing `self`."""
    assert "ChromaStore" in {
        c.name for c in classes(ROOT / "indexer/store/vectors/chroma.py")
    }  # read
    found = [f for p in sources("indexer/store") for f in mixed_classes(p)]
    assert found == []


def test_no_class_has_more_than_25_public_methods():
    found = [f"{p.relative_to(ROOT)}: {f}" for p in sources(*PACKAGES) for f in large_classes(p)]
    assert found == [], "split it by job, into parts it is given"


def test_the_composition_checks_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    methods = "".join(f"    def m{i}(self): pass\n" for i in range(MAX_PUBLIC_METHODS))
    bad.write_text(
        "from psycopg.types.string import StrDumper\n"
        "from indexer.store.parts import Reads\n"
        "class Log(Reads, Writes):\n    pass\n"
        "class Dumper(StrDumper):\n    pass\nclass Big:\n"
        + methods
        + "    async def more(self): pass\n"
        + "class Fine(Protocol):\n    def _a(self): pass\n"
        + "class Gone(LookupError, KeyError, Exception):\n    pass\n"
    )
    assert mixed_classes(bad) == ["Log(Reads, Writes)"]
    assert large_classes(bad) == ["Big: 26 public methods"]


# Top-level modules of each package; every other module sits in the subpackage of its job.
TOP_LEVEL = {
    "indexer": {
        "__init__.py",
        "clock.py",
        "records.py",
        "tokens.py",  # the keyword tokenizer: the store cuts index keys, search queries
        "components.py",
        "datadir.py",
    },
    "appservice": {"__init__.py", "logs.py", "app.py", "httpclient.py"},
}


def misplaced_modules(root: Path) -> list[str]:
    """`.py` files directly under indexer/ or appservice/ that are not the allowed top-level
    ones, and folders of modules without an `__init__.py` (pyproject lists packages)."""
    found = []
    for top, allowed in TOP_LEVEL.items():
        found += [
            f"{top}/{p.name}" for p in sorted((root / top).glob("*.py")) if p.name not in allowed
        ]
        found += [
            f"{d.relative_to(root)}/ has no __init__.py"
            for d in sorted({p.parent for p in (root / top).rglob("*.py")})
            if not (d / "__init__.py").exists()
        ]
    return found


def test_every_module_sits_in_the_package_of_its_job():
    assert (
        ROOT / "indexer" / "store" / "eventlog" / "log.py"
    ).exists()  # the layout is really read
    assert misplaced_modules(ROOT) == [], (
        "move it into the subpackage of its job (docs/architecture.md)"
    )


def test_the_module_placement_check_can_fail(tmp_path):
    for rel in (
        "indexer/__init__.py",
        "indexer/clock.py",
        "indexer/stray.py",
        "indexer/store/__init__.py",
        "indexer/store/journal.py",
        "indexer/loose/x.py",
        "appservice/__init__.py",
        "appservice/logs.py",
        "appservice/cli.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert misplaced_modules(tmp_path) == [
        "indexer/stray.py",
        "indexer/loose/ has no __init__.py",
        "appservice/cli.py",
    ]


# indexer's layers, imported downwards only (docs/architecture.md): each package uses
# those below it and none above, so no two packages import each other.
LAYERS = (
    ("indexer.records", "indexer.clock", "indexer.config", "indexer.tokens"),
    ("indexer.store",),  # what is kept: the event log, the vectors, the journal
    ("indexer.models",),  # the embedders and the turns they take
    ("indexer.ingest",),  # events in, appended to the store
    ("indexer.pipeline",),  # pending events -> windows -> vectors
    ("indexer.derived",),  # the derived filter (the pipeline's screen), reference corpora
    ("indexer.search",),  # a query over all of it
    ("indexer.moderation",),  # what the moderators see: the report over the feedback
)


def layer(module: str) -> int:
    """The layer of `module` in LAYERS; above them all: components (the one graph
    builder), datadir, the package itself."""
    for n, names in enumerate(LAYERS):
        if any(module == m or module.startswith(m + ".") for m in names):
            return n
    return len(LAYERS)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.startswith("indexer")
        for t in targets
        if t.startswith("indexer") and layer(t) > layer(m)
    )


def test_indexer_imports_down_its_layers():
    graph = import_graph(nested=True)
    assert (
        "indexer.store.vectors.generations" in graph["indexer.store.vectors.chroma"]
    )  # the graph is really read
    assert upward_imports(graph) == []


def test_the_layer_check_can_fail():
    assert upward_imports(
        {
            "indexer.store.eventlog.log": {"indexer.records", "indexer.search.lexical"},
            "indexer.records": {"indexer.store.journal"},
            "indexer.ingest.gate": {"indexer.store.journal", "indexer.pipeline.chunker"},
            "indexer.pipeline.pipeline": {"indexer.ingest.history", "indexer.derived.filter"},
            "indexer.derived.audit": {"indexer.pipeline.chunker", "indexer.search.texts"},
            "indexer.search.present": {"indexer.components", "indexer.derived.filter"},
            "indexer.store.vectors.chroma": {"indexer.search.lexical", "indexer.store"},
            "indexer.models.embedder": {"indexer.config", "indexer.pipeline.chunker"},
        }
    ) == [
        "indexer.derived.audit -> indexer.search.texts",
        "indexer.ingest.gate -> indexer.pipeline.chunker",
        "indexer.models.embedder -> indexer.pipeline.chunker",
        "indexer.pipeline.pipeline -> indexer.derived.filter",
        "indexer.records -> indexer.store.journal",
        "indexer.search.present -> indexer.components",
        "indexer.store.eventlog.log -> indexer.search.lexical",
        "indexer.store.vectors.chroma -> indexer.search.lexical",
    ]


# appservice/bot and appservice/homeserver meet only through each other's ports (the
# bot's Matrix, the service's BotPort), wired in appservice/app.py: neither imports
# the other, at any depth.
# The demo and the local-Synapse tools sit below the CLI (which starts them): they build
# the service through the composition root (appservice/app.py), never through cli/.
APART = (
    ("appservice.bot", "appservice.homeserver"),
    ("appservice.homeserver", "appservice.bot"),
    ("appservice.tools", "appservice.cli"),
)


def crossings(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        for a, b in APART
        if (m == a or m.startswith(a + ".")) and (t == b or t.startswith(b + "."))
    )


def test_the_bot_and_the_homeserver_do_not_import_each_other():
    graph = import_graph(nested=True)
    assert "appservice.bot.responder" in graph["appservice.bot.bot"]  # really read
    assert crossings(graph) == []


def test_the_crossing_check_can_fail():
    assert crossings(
        {
            "appservice.bot.responder": {"appservice.homeserver.roomstate", "indexer.records"},
            "appservice.homeserver.service": {"appservice.bot.bot"},
            "appservice.cli.main": {
                "appservice.bot.bot",
                "appservice.homeserver.service",
                "appservice.tools.demo",
            },
            "appservice.tools.demo": {"appservice.app", "appservice.cli.serve"},
        }
    ) == [
        "appservice.bot.responder -> appservice.homeserver.roomstate",
        "appservice.homeserver.service -> appservice.bot.bot",
        "appservice.tools.demo -> appservice.cli.serve",
    ]


# A line of the window document (pipeline.chunker.document), which the store and search
# never read back: hits carry typed lines.
DOCUMENT_LINE = "[2024-01-02 10:00] @alice:example.org: grub rescue"


def document_parsers(path: Path) -> list[str]:
    """Regular expressions in a module that would take a document line apart: every
    string literal given to `re`/`regex` that matches up to the body's start."""
    import re

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("re", "regex")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        try:
            m = re.compile(node.args[0].value).match(DOCUMENT_LINE)
        except re.error:
            continue
        if m and m.end() >= DOCUMENT_LINE.index("grub"):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_module_parses_the_window_document():
    assert [f for p in sources(*PACKAGES) for f in document_parsers(p)] == []


def test_the_document_parser_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        'import re\nHEAD = re.compile(r"\\[[^\\]\\n]*\\] \\S+: ")\nWORD = re.compile(r"\\w+")\n'
    )
    assert document_parsers(bad) == ["probe.py:2"]


# Typed seams: a port declares what its callers use. An optional capability is a protocol
# of its own, asked with isinstance (indexer/models/ports.py: EachEncoder, QueryEncoder,
# Tokenizer...), or a member every implementation declares (test fakes included); it is
# never probed for by name, and no class forwards what it lacks (`__getattr__`), which
# hides what it offers. The probes left read a library's attribute that not every
# version or object has, each with its reason.
PROBES_ALLOWED = {
    (
        "indexer/config/errors.py",
        "model_fields",
    ): "pydantic's field table: a class attribute of a model, absent on other annotations",
    ("indexer/config/errors.py", "__pydantic_fields__"): "the same table on a pydantic dataclass",
    (
        "indexer/config/errors.py",
        "metadata",
    ): "a pydantic FieldInfo's constraints; the key may have no FieldInfo (None)",
    (
        "indexer/models/embedder.py",
        "get_embedding_dimension",
    ): "sentence-transformers' newer name for get_sentence_embedding_dimension",
    (
        "indexer/store/vectors/generations.py",
        "_identifier",
    ): "chromadb's cache key of an embedded client, private and not on every client",
    (
        "appservice/httpclient.py",
        "errno",
    ): "urllib's URLError.reason is an OSError (with errno) or a string",
}


def name_probes(path: Path, root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(module, attribute, line) of every getattr/hasattr naming the attribute by a
    string constant, and of every `__getattr__` a class defines (attribute
    "__getattr__")."""
    where = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            found.append((where, node.args[1].value, node.lineno))
        elif isinstance(node, ast.ClassDef):
            found += [
                (where, "__getattr__", f.lineno)
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                and f.name == "__getattr__"
            ]
    return sorted(found, key=lambda p: p[2])


def test_no_port_is_probed_for_a_member_by_name():
    probes = [p for src in sources(*PACKAGES) for p in name_probes(src)]
    assert ("indexer/models/embedder.py", "get_embedding_dimension") in {
        (w, a) for w, a, _ in probes
    }  # the source is really read
    found = [f"{w}:{line}: {a}" for w, a, line in probes if (w, a) not in PROBES_ALLOWED]
    assert found == [], (
        "declare the member on the port (a default in every implementation) "
        "or a runtime-checkable Protocol asked with isinstance:\n" + "\n".join(found)
    )
    unused = sorted(set(PROBES_ALLOWED) - {(w, a) for w, a, _ in probes})
    assert unused == [], "no longer probed: take it off PROBES_ALLOWED"


def test_the_name_probe_check_can_fail(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text(
        "def f(embedder, name):\n"
        "    own = getattr(embedder, 'encode_each', None)\n"
        "    if hasattr(embedder, 'encode_queries'):\n"
        "        return getattr(embedder, name)\n"  # by a variable: config, not a port
        "    return embedder.encode\n"
        "class Side:\n"
        "    def __getattr__(self, attr):\n"
        "        return 1\n"
    )
    assert name_probes(bad) == [
        ("probe.py", "encode_each", 2),
        ("probe.py", "encode_queries", 3),
        ("probe.py", "__getattr__", 7),
    ]
