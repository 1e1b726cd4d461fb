"""Embedder backends (embedder.backend): the same model run another way gives the same
vectors, so a collection survives a switch within a vector class and is rebuilt
across classes; the ONNX files are made offline from the packaged weights, once.
The tests that load the real model are `slow` (about 20 s): the full run has them."""

from __future__ import annotations

import logging

import pytest

from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.datadir import init_data_dir
from matrix_sources.indexer.models.embedder import (
    DEFAULT_BACKEND,
    VECTOR_CLASS,
    HashEmbedder,
    bf16_supported,
    encode_each,
    load_embedder,
)
from matrix_sources.indexer.models.onnx_embedder import OPSET
from matrix_sources.indexer.pipeline.pipeline import Pipeline
from matrix_sources.indexer.pipeline.rebuild import ensure_meta, expected_meta, rebuild_reason
from matrix_sources.indexer.store.eventlog.log import EventLog
from matrix_sources.indexer.store.vectors.chroma import ChromaStore

# Chat as the pipeline embeds it (message bodies, one per line), a search-box query,
# a question, and a window past the model's 256 word pieces (truncated alike).
TEXTS = [
    "how do I rotate the signing key?",
    "signing key rotation",
    "stig_: you need to restart the service after editing homeserver.yaml\nok thanks, "
    "that worked\nnp",
    "my wifi drops every few minutes on 24.04 with the iwlwifi driver\ntry "
    "`sudo modprobe -r iwlwifi && sudo modprobe iwlwifi 11n_disable=1`\nstill drops",
    "the disk is full again: /var/lib/postgresql grew to 40G overnight. what can I purge?",
    " ".join(f"word{i} apt-get install linux-firmware after the upgrade" for i in range(80)),
    "ok",
]


def cosines(a: list[list[float]], b: list[list[float]]) -> list[float]:
    return [sum(x * y for x, y in zip(u, v)) for u, v in zip(a, b)]


@pytest.fixture(scope="module")
def torch_vectors():
    return load_embedder("all-MiniLM-L6-v2", "torch").encode(TEXTS)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "torch-bf16"])
def test_a_float_backend_gives_torchs_vectors(backend, torch_vectors, cache):
    """What lets a collection made by torch be kept when the backend switches."""
    if backend == "torch-bf16" and not bf16_supported():
        pytest.skip("this CPU has no native bfloat16: torch-bf16 runs as torch")
    emb = load_embedder("all-MiniLM-L6-v2", backend, cache)
    assert emb.backend == backend and VECTOR_CLASS[backend] == VECTOR_CLASS["torch"]
    vectors = emb.encode(TEXTS)
    assert all(len(v) == 384 for v in vectors)
    assert min(cosines(vectors, torch_vectors)) >= 0.99
    # One text at a time (no padding) gives the same as in a batch.
    assert cosines([emb.encode([TEXTS[2]])[0]], [vectors[2]])[0] >= 0.999


@pytest.mark.model
@pytest.mark.slow
def test_int8_is_close_but_its_own_class(torch_vectors, cache):
    """int8 vectors drift further than 0.99 on some texts: a switch to or from it
    rebuilds the collection rather than mixing them."""
    emb = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    sims = cosines(emb.encode(TEXTS), torch_vectors)
    assert min(sims) >= 0.9 and sum(sims) / len(sims) >= 0.97
    assert VECTOR_CLASS["onnx-int8"] != VECTOR_CLASS["torch"]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx-int8", "onnx"])
def test_each_text_on_its_own_is_what_a_call_of_one_gives(backend, cache):
    """encode_each (the presenter's lines) runs passes of one text on other threads and
    another session: the vectors must be those of encode([text]), to the last bit, or a
    line would rank otherwise in the service than in the stopped CLI."""
    emb = load_embedder("all-MiniLM-L6-v2", backend, cache)
    texts = TEXTS * 3  # more passes than threads
    each = emb.encode_each(texts)
    assert each == [emb.encode([t])[0] for t in texts]
    batched = emb.encode(texts)
    if backend == "onnx-int8":  # what one pass per text is for
        assert any(a != b for a, b in zip(each, batched))
    assert encode_each(HashEmbedder(), ["a b", "c"]) == [
        HashEmbedder().encode([t])[0] for t in ("a b", "c")
    ]


@pytest.mark.model
@pytest.mark.slow
def test_the_pipeline_taken_a_pass_a_turn_embeds_as_in_one_call(cache):
    """The service's pipeline lets searches in between forward passes (models/turns.py):
    its windows' vectors must be those of whole calls, pass for pass."""
    from matrix_sources.indexer.models.embedder import encode_in_length_order
    from matrix_sources.indexer.models.turns import ModelTurns

    emb = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    texts = TEXTS * 5  # several calls of 16
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    calls: dict[int, list[float]] = {}
    for start in range(0, len(order), 16):  # what one encode call per 16 texts gives
        part = order[start : start + 16]
        calls.update(zip(part, emb.encode([texts[i] for i in part])))
    expected = [calls[i] for i in range(len(texts))]
    assert encode_in_length_order(emb, texts, 16) == expected
    assert encode_in_length_order(emb, texts, 16, ModelTurns()) == expected


@pytest.mark.model
@pytest.mark.slow
def test_the_export_is_fused_and_int8_quantises_the_attention(cache):
    """What makes onnx-int8 fast (docs/benchmarks.md, "Embedder backends"): the six
    attention blocks fused (an export with torch's SDPA attention fuses none), and their
    projections quantised too. Pads and masks per batch: a short text embedded beside
    the longest one gets the vector it gets alone (float; int8 quantises a batch's
    activations with one scale, so its neighbours move a vector a little: "ok" beside
    the 256-piece text, 0.941)."""
    import onnx

    emb = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    float_file = emb.path.with_name(emb.path.name.replace("-int8", ""))
    ops = [n.op_type for n in onnx.load(str(float_file)).graph.node]
    assert ops.count("Attention") == 6 and ops.count("SkipLayerNormalization") == 12
    ops = [n.op_type for n in onnx.load(str(emb.path)).graph.node]
    assert ops.count("QAttention") == 6 and "MatMulInteger" in ops
    for model, floor in ((load_embedder("all-MiniLM-L6-v2", "onnx", cache), 0.9999), (emb, 0.93)):
        alone = [model.encode([t])[0] for t in TEXTS]
        model.batch_size = len(TEXTS)
        assert min(cosines(model.encode(TEXTS), alone)) >= floor


@pytest.mark.model
@pytest.mark.slow
def test_the_onnx_files_are_made_once_offline_in_the_cache(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    first = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    made = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert first.path.name in made and len(made) == 2  # the float export and its int8
    again = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    assert again.path == first.path
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == made
    assert not any(".tmp" in name for name in made)


class Backend(HashEmbedder):
    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend


@pytest.mark.parametrize(
    "switch, rebuilds",
    [
        (("torch", "onnx"), False),
        (("torch", "torch-bf16"), False),
        (("onnx", "onnx-int8"), True),
        (("onnx-int8", "torch"), True),
    ],
)
def test_a_backend_switch_rebuilds_only_across_vector_classes(tmp_path, switch, rebuilds):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma")
    before, after = switch
    pipeline = Pipeline(log, Backend(before), store)
    log.append([(_message(i), None) for i in range(3)])
    ensure_meta(store, log, pipeline)
    pipeline.process_all()
    assert store.meta()["backend"] == before and store.count()
    pipeline.embedder = Backend(after)
    assert ensure_meta(store, log, pipeline) is rebuilds
    assert store.meta()["backend"] == after and store.count()
    log.close()


def test_a_collection_from_before_backends_counts_as_torchs(tmp_path):
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma")
    pipeline = Pipeline(log, Backend("torch"), store)
    log.append([(_message(0), None)])
    pipeline.process_all()
    old = {k: v for k, v in expected_meta(pipeline.embedder).items() if k != "backend"}
    store.set_meta(old)  # as the collections made before backends: no "backend" key
    assert "backend" not in store.meta()
    pipeline.embedder = Backend("onnx")
    assert ensure_meta(store, log, pipeline) is False
    log.close()


def test_an_int8_collection_of_signed_weights_is_rebuilt_once(tmp_path):
    """The int8 file of before multiplied by signed weights, which a CPU without VNNI
    saturates: its vectors depended on the CPU. A collection it made (no int8_weights in
    its meta) is rebuilt, naming why; the new one is kept."""
    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma")
    pipeline = Pipeline(log, Backend("onnx-int8"), store)
    log.append([(_message(i), None) for i in range(3)])
    pipeline.process_all()
    old = {k: v for k, v in expected_meta(pipeline.embedder).items() if k != "int8_weights"}
    store.set_meta(old)
    assert "int8_weights" not in store.meta()
    assert "int8_weights: None -> 'uint8'" in rebuild_reason(store, log, pipeline.embedder)
    assert ensure_meta(store, log, pipeline) is True
    assert store.meta()["int8_weights"] == "uint8" and store.count()
    assert ensure_meta(store, log, pipeline) is False
    # A float backend records no int8 weights, and one of its collections is kept.
    assert "int8_weights" not in expected_meta(Backend("onnx"))
    log.close()


@pytest.mark.model
@pytest.mark.slow
def test_int8_weights_are_unsigned_so_every_cpu_computes_the_same_vectors(cache):
    """Every quantised weight of the int8 file is unsigned, and ONNX Runtime's unsigned x
    unsigned integer product is exact on this CPU at the extremes (all 255s), where a
    signed weight's product saturates on a CPU without VNNI (AVX2): the products are
    the true integers on any CPU."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    emb = load_embedder("all-MiniLM-L6-v2", "onnx-int8", cache)
    graph = onnx.load(str(emb.path)).graph
    ints = {
        i.name: i.data_type
        for i in graph.initializer
        if i.data_type in (TensorProto.INT8, TensorProto.UINT8) and len(i.dims) == 2
    }
    assert len(ints) >= 6 * 3 and set(ints.values()) == {TensorProto.UINT8}  # 6 layers
    a = np.full((4, 384), 255, dtype=np.uint8)
    b = np.full((384, 8), 255, dtype=np.uint8)
    node = helper.make_node("MatMulInteger", ["A", "B"], ["Y"])
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, 384])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, 8])],
        [numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"A": a})[0]
    assert (got == a.astype(np.int64) @ b.astype(np.int64)).all()


def test_an_unknown_backend_is_refused_naming_the_key(tmp_path):
    init_data_dir(tmp_path, "http://127.0.0.1:8008", "localhost")
    config = tmp_path / "config.yaml"
    text = config.read_text()
    assert "    backend: onnx-int8\n" in text  # the default
    config.write_text(text.replace("    backend: onnx-int8\n", "    backend: tensorrt\n"))
    with pytest.raises(ConfigError, match="index.embedder.backend"):
        load_config(config)
    config.write_text(config.read_text().replace("tensorrt", "onnx"))
    assert load_config(config).index.embedder.backend == "onnx"


def _message(i: int):
    from matrix_sources.indexer.records import EventID, Message, RoomID, UserID

    return Message(
        EventID(f"$m{i}"),
        RoomID("!r:example.org"),
        UserID("@a:example.org"),
        1_700_000_000_000 + i * 1000,
        f"message {i} about the signing key",
    )


def test_a_new_export_removes_the_files_of_older_ones(tmp_path, monkeypatch):
    """An upgrade (new weights or exporter version) makes new files; the old pair goes."""
    from matrix_sources.indexer.models import onnx_embedder as ox

    monkeypatch.setattr(ox, "_export_fp32", lambda src, dest: dest.write_bytes(b"fp32"))
    monkeypatch.setattr(ox, "_quantise", lambda src, dest: dest.write_bytes(b"int8"))
    stale = [
        tmp_path / "all-MiniLM-L6-v2-000000000000.onnx",
        tmp_path / "all-MiniLM-L6-v2-000000000000-int8.onnx",
    ]
    for p in stale:
        p.write_bytes(b"old")
    other = tmp_path / "notes.txt"
    other.write_text("kept")
    target = ox.make_model(tmp_path, int8=True)
    assert target == ox.model_path(tmp_path, True) and target.read_bytes() == b"int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [ox.model_path(tmp_path, False).name, target.name, "notes.txt"]
    )


def _config_with(tmp_path, embedder: dict, search: dict | None = None):
    from ruamel.yaml import YAML

    init_data_dir(tmp_path, "http://127.0.0.1:8008", "localhost")
    y = YAML()
    raw = y.load((tmp_path / "config.yaml").read_text())
    raw["index"]["embedder"] = embedder
    for k, v in (search or {}).items():
        raw["search"][k] = v
    with open(tmp_path / "config.yaml", "w") as f:
        y.dump(raw, f)
    return load_config(tmp_path / "config.yaml")


def test_the_multilingual_model_needs_no_backend_and_runs_its_own(tmp_path, caplog):
    """A backend the model does not run on falls back to the model's own, with a log
    line naming both (issue 45: the README's one-line change on an `init`-written
    config, whose backend is onnx-int8, must start)."""
    cfg = _config_with(tmp_path, {"model": "multilingual-e5-small"})
    assert cfg.index.embedder.backend == "q4"
    with caplog.at_level(logging.WARNING):
        cfg = _config_with(
            tmp_path / "b", {"model": "multilingual-e5-small", "backend": "onnx-int8"}
        )
    assert cfg.index.embedder.backend == "q4"
    [line] = [r for r in caplog.records if r.msg == "embedder_backend_fallback"]
    assert (line.model, line.written, line.backend) == ("multilingual-e5-small", "onnx-int8", "q4")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cfg = _config_with(tmp_path / "c", {"model": "all-MiniLM-L6-v2", "backend": "q4"})
    assert cfg.index.embedder.backend == DEFAULT_BACKEND
    assert [r.written for r in caplog.records if r.msg == "embedder_backend_fallback"] == ["q4"]
    with pytest.raises(ConfigError, match="index.embedder.backend: .*not 'cuda'"):
        _config_with(tmp_path / "d", {"model": "multilingual-e5-small", "backend": "cuda"})


def test_the_pair_of_models_needs_no_backend_and_holds_e5s_floor(tmp_path):
    """Its similarity sits on multilingual-e5-small's scale (pair_embedder.py): e5's
    margins per script; its floor and margin its own (fitted two-fold, heldout.py)."""
    pair = "multilingual-e5-small+all-MiniLM-L6-v2"
    cfg = _config_with(tmp_path, {"model": pair})
    e5 = _config_with(tmp_path / "e5", {"model": "multilingual-e5-small"})
    assert cfg.index.embedder.backend == "q4"
    assert (
        cfg.search.no_shared_word_margin_by_script
        == e5.search.no_shared_word_margin_by_script
        == {"cyrillic": 0.0, "cjk": 0.04}
    )
    assert (cfg.search.min_similarity, cfg.search.no_shared_word_margin) == (0.85, 0.01)
    assert (e5.search.min_similarity, e5.search.no_shared_word_margin) == (0.85, 0.02)
    assert (
        _config_with(tmp_path / "b", {"model": pair, "backend": "onnx-int8"}).index.embedder.backend
        == "q4"
    )


def test_the_readmes_one_line_change_on_an_init_written_config_loads_the_pair(tmp_path):
    """The config as `init` writes it (backend onnx-int8), only the model's line changed
    as the README says: it loads, and the pair's embedder runs on q4."""
    from matrix_sources.indexer.models.embedder import load_embedder

    init_data_dir(tmp_path, "http://127.0.0.1:8008", "localhost")
    path = tmp_path / "config.yaml"
    text = path.read_text()
    assert "backend: onnx-int8" in text and "model: all-MiniLM-L6-v2" in text
    pair = "multilingual-e5-small+all-MiniLM-L6-v2"
    path.write_text(text.replace("model: all-MiniLM-L6-v2", f"model: {pair}", 1))
    cfg = load_config(path)
    assert (cfg.index.embedder.model, cfg.index.embedder.backend) == (pair, "q4")
    embedder = load_embedder(cfg.index.embedder.model, cfg.index.embedder.backend, cfg.models_dir)
    assert embedder.backend == "q4" and embedder.dim == 769


def test_an_unset_floor_is_the_models_and_a_written_one_is_kept(tmp_path):
    """Each model has its own scale of cosine similarity: the template leaves the floor
    empty, so a change of model brings its calibrated floor (config.MODEL_FLOORS)."""
    from matrix_sources.indexer.config import MODEL_FLOORS

    minilm = _config_with(tmp_path / "a", {"model": "all-MiniLM-L6-v2"})
    e5 = _config_with(tmp_path / "b", {"model": "multilingual-e5-small"})
    assert (
        (minilm.search.min_similarity, minilm.search.no_shared_word_margin)
        == MODEL_FLOORS["all-MiniLM-L6-v2"]
        == (0.34, 0.11)
    )
    assert (e5.search.min_similarity, e5.search.no_shared_word_margin) == MODEL_FLOORS[
        "multilingual-e5-small"
    ]
    assert e5.search.min_similarity > minilm.search.min_similarity
    mine = _config_with(tmp_path / "c", {"model": "multilingual-e5-small"}, {"min_similarity": 0.5})
    assert (mine.search.min_similarity, mine.search.no_shared_word_margin) == (
        0.5,
        MODEL_FLOORS["multilingual-e5-small"][1],
    )
    # The margin per script of the question: e5's Cyrillic one (docs/multilingual.md).
    assert minilm.search.no_shared_word_margin_by_script == {}
    assert e5.search.no_shared_word_margin_by_script == {"cyrillic": 0.0, "cjk": 0.04}
    written = _config_with(
        tmp_path / "d",
        {"model": "multilingual-e5-small"},
        {"no_shared_word_margin_by_script": {"cjk": 0.05}},
    )
    assert written.search.no_shared_word_margin_by_script == {"cjk": 0.05}


def test_a_margin_for_a_script_that_does_not_exist_names_the_key(tmp_path):
    with pytest.raises(
        ConfigError,
        match="search.no_shared_word_margin_by_script.*'russian' is not a script's name",
    ):
        _config_with(
            tmp_path,
            {"model": "multilingual-e5-small"},
            {"no_shared_word_margin_by_script": {"russian": 0.0}},
        )


def test_the_configs_models_are_the_embedders():
    from matrix_sources.indexer.config import MODEL_FLOORS, ONE_BACKEND
    from matrix_sources.indexer.config.per_model import DEFAULT_BACKEND as CONFIG_DEFAULT
    from matrix_sources.indexer.models.embedder import MODEL_BACKENDS, model_key

    assert {m: b[0] for m, b in MODEL_BACKENDS.items() if len(b) == 1} == {
        m: b for m, b in ONE_BACKEND.items() if m in MODEL_BACKENDS
    }
    assert all(model_key(m) for m in ONE_BACKEND) and set(MODEL_BACKENDS) <= set(MODEL_FLOORS)
    assert CONFIG_DEFAULT == DEFAULT_BACKEND
    assert all(model_key(m) in MODEL_BACKENDS for m in MODEL_FLOORS)


def test_a_switch_of_model_rebuilds(tmp_path):
    class Named(HashEmbedder):
        def __init__(self, name: str, backend: str) -> None:
            super().__init__()
            self.name, self.backend = name, backend

    log = EventLog(tmp_path / "eventlog.sqlite3")
    store = ChromaStore(path=tmp_path / "chroma")
    pipeline = Pipeline(log, Named("sentence-transformers/all-MiniLM-L6-v2", "onnx-int8"), store)
    log.append([(_message(i), None) for i in range(3)])
    ensure_meta(store, log, pipeline)
    pipeline.process_all()
    pipeline.embedder = Named("intfloat/multilingual-e5-small", "q4")
    assert ensure_meta(store, log, pipeline) is True
    assert store.meta()["embedder"] == "intfloat/multilingual-e5-small"


@pytest.fixture(scope="module")
def e5():
    return load_embedder("multilingual-e5-small", "q4")


@pytest.mark.model
@pytest.mark.slow  # loads the multilingual model: in the full run
def test_e5_loads_offline_from_its_package_and_reads_other_languages(e5, monkeypatch):
    """The packaged 4-bit weights, no network: a question in German, Russian or Chinese
    lands nearest the English message that answers it."""
    import numpy as np

    from matrix_sources.indexer.models.embedder import query_side

    assert (e5.name, e5.dim, e5.backend) == ("intfloat/multilingual-e5-small", 384, "q4")
    chat = [
        "clean up old images and stopped containers with docker system prune -a",
        "run nginx and php-fpm in one container with supervisord as the CMD",
        "the appium inspector needs the app's bundle id to start a session",
    ]
    asks = [
        "Wie bekomme ich nginx und php zusammen in einen Container?",
        "как удалить старые образы docker, чтобы освободить диск?",
        "appium inspector 启动会话需要什么参数？",
    ]
    docs = np.asarray(e5.encode(chat))
    queries = np.asarray(query_side(e5).encode(asks))
    assert np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-3)
    assert list((queries @ docs.T).argmax(axis=1)) == [1, 0, 2]


@pytest.mark.model
@pytest.mark.slow  # loads the multilingual model: in the full run
def test_e5_embeds_a_question_with_both_prefixes_and_a_passage_with_its_own(e5, monkeypatch):
    """A question's vector is the normalised mix of its query-side and passage-side
    vectors (QUERY_PASSAGE_WEIGHT); a window's is the passage side alone."""
    import numpy as np

    from matrix_sources.indexer.models import e5_embedder
    from matrix_sources.indexer.models.embedder import query_side

    texts = ["how do I rotate the signing key?", "как удалить старые образы docker?"]
    as_passage = np.asarray(e5.encode(texts))
    monkeypatch.setattr(e5_embedder, "QUERY_PASSAGE_WEIGHT", 0.0)
    as_query = np.asarray(query_side(e5).encode(texts))
    assert (as_query * as_passage).sum(axis=1).max() < 0.99  # each prefix its own vector
    monkeypatch.setattr(e5_embedder, "QUERY_PASSAGE_WEIGHT", 0.5)
    asked = np.asarray(query_side(e5).encode(texts))
    mean = as_query + as_passage
    assert np.allclose(asked, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-6)
    assert np.allclose(np.linalg.norm(asked, axis=1), 1.0)
    assert query_side(e5).encode([]) == []
    assert query_side(e5).name == e5.name and query_side(e5).dim == 384


@pytest.mark.model
@pytest.mark.slow  # loads the multilingual model: in the full run
def test_e5_reads_a_long_text_as_its_first_word_pieces_and_batches_agree(e5):
    from matrix_sources.indexer.models.e5_embedder import MAX_WORD_PIECES

    long = " ".join(f"word{i} apt-get install linux-firmware" for i in range(300))
    cut = e5._truncated(long, False)
    assert len(cut) < len(long) and e5._model.token_count(cut, False) <= MAX_WORD_PIECES
    assert e5._model.token_count(long[: len(cut) + 40], False) > MAX_WORD_PIECES
    alone = e5.encode([long])[0]
    assert sum(a * b for a, b in zip(alone, e5.encode([cut])[0])) > 0.9999
    batch = e5.encode(TEXTS)
    for i in (0, 2, 5):
        one = e5.encode([TEXTS[i]])[0]
        assert sum(a * b for a, b in zip(one, batch[i])) > 0.999


@pytest.mark.model
@pytest.mark.slow
def test_two_processes_exporting_into_one_folder_at_once_both_succeed(tmp_path):
    """Services (or test workers) sharing models_dir may start together: both export and
    quantise the same model at once. ONNX Runtime's quantiser writes a fixed-named file
    beside its input; each process quantises from its own link, so neither reads the
    other's half-written file (both used to fail: "Failed to find proper ai.onnx
    domain")."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "matrix_sources.indexer.models.onnx_embedder", str(tmp_path)]
    procs = [
        subprocess.Popen([*cmd, "--int8"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [p.communicate()[1].decode(errors="replace")[-500:] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    from matrix_sources.indexer.models.onnx_embedder import model_path

    assert {f.name for f in tmp_path.iterdir()} == {
        model_path(tmp_path, False).name,
        model_path(tmp_path, True).name,
    }
