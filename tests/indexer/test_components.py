"""The object graph is built in one place (components.Index.open), acyclic, and not
patched afterwards."""

from __future__ import annotations

import ast

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.components import Index
from matrix_sources.indexer.config import load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import HashEmbedder
from tests.paths import ROOT


@pytest.fixture
def index(tmp_path):
    data = tmp_path / "data"
    init_data_dir(data, "http://127.0.0.1:8008", "example.org")
    y = YAML()
    raw = y.load((data / "config.yaml").read_text())
    raw["index"]["embedder"] = "hash"
    raw["index"]["compaction_interval_seconds"] = 7
    with open(data / "config.yaml", "w") as f:
        y.dump(raw, f)
    index = Index.open(load_config(data / "config.yaml"), HashEmbedder())
    yield index
    index.close()


def reachable(start: object) -> list[object]:
    """Every object of this project's packages reachable from `start` through
    attributes, containers and bound methods."""
    seen: dict[int, object] = {}
    todo = [start]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
            continue
        if isinstance(obj, dict):
            todo.extend(obj.values())
            continue
        if hasattr(obj, "__self__") and hasattr(obj, "__func__"):  # a bound method
            todo.append(obj.__self__)
            continue
        if not type(obj).__module__.startswith("matrix_sources."):
            continue
        seen[id(obj)] = obj
        slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ())]
        values = list(getattr(obj, "__dict__", {}).values())
        values += [getattr(obj, s) for s in slots if hasattr(obj, s)]
        todo.extend(values)
    return list(seen.values())


def test_ingest_and_the_pipeline_share_a_guard_and_ingest_never_reaches_the_pipeline(index):
    purger, pipeline = index.ingest.purger, index.pipeline
    assert purger.guard is pipeline.guard and purger.store is pipeline.store
    assert purger.compaction is pipeline.compaction  # a purge's compaction is the schedule's
    assert pipeline.lock is pipeline.guard.lock
    assert all(o is not pipeline for o in reachable(index.ingest))  # no cycle through it
    assert any(o is index.ingest for o in reachable(pipeline))  # admits, labels


def test_index_open_sets_what_the_service_used_to_patch(index):
    assert index.pipeline.compaction.every == 7 == index.cfg.index.compaction_interval_seconds
    assert index.pipeline.derived is not None and index.pipeline.history is index.ingest.history
    assert index.answers.eventlog is index.eventlog


def test_the_service_does_not_patch_what_index_open_built():
    """No `self.<part>.<attr> = ...` in the service's modules for a part Index.open made."""
    built = {
        "index",
        "eventlog",
        "store",
        "embedder",
        "gate",
        "ingest",
        "pipeline",
        "searcher",
        "answers",
        "responder",
    }
    patched = [
        ast.unparse(t)
        for path in sorted((ROOT / "matrix_sources" / "appservice" / "homeserver").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Attribute)
        and isinstance(t.value.value, ast.Name)
        and t.value.value.id == "self"
        and t.value.attr in built
    ]
    # The gate's allowlist is reloaded while running (allowlistwatch.py; one Gate shared
    # with ingest).
    assert patched == ["self.gate.allowlist"]
