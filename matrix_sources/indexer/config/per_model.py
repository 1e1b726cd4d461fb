"""What follows from the embedder model config.yaml names: the backends it runs on, and
where it leaves search's floor unset, the floor calibrated for it."""

from __future__ import annotations

from typing import Literal, get_args

EmbedderBackend = Literal["torch", "torch-bf16", "onnx", "onnx-int8", "q4"]  # embedder.BACKENDS
EMBEDDER_BACKENDS: tuple[str, ...] = get_args(EmbedderBackend)
DEFAULT_BACKEND: EmbedderBackend = "onnx-int8"  # embedder.DEFAULT_BACKEND (a test: equal)
# A model that runs one way only, and that way (embedder.MODEL_BACKENDS; a test holds
# them equal): its backend need not be written.
ONE_BACKEND = {
    "multilingual-e5-small": "q4",
    "intfloat/multilingual-e5-small": "q4",
    "multilingual-e5-small+all-MiniLM-L6-v2": "q4",
}
# search.min_similarity and no_shared_word_margin where config.yaml leaves them unset,
# per model: calibrated on the dev sets and the off-topic questions (docs/benchmarks.md,
# "Abstain"; docs/multilingual.md for multilingual-e5-small, whose cosines run higher).
MODEL_FLOORS = {"all-MiniLM-L6-v2": (0.34, 0.11), "multilingual-e5-small": (0.85, 0.02)}
MODEL_FLOORS["intfloat/multilingual-e5-small"] = MODEL_FLOORS["multilingual-e5-small"]
# The pair's similarity is each model's cosine from its own floor, on e5's scale
# (pair_embedder.py), so e5's margins per script hold for it; its floor and margin are
# its own: what bench/heldout.py's fit chooses on every dev item, the fit measured on
# half the items when fitted on the other half, both ways (the halves chose 0.84 and
# 0.85, margin 0.02; docs/multilingual.md, "Held out").
MODEL_FLOORS["multilingual-e5-small+all-MiniLM-L6-v2"] = (0.85, 0.01)
# search.no_shared_word_margin_by_script where config.yaml leaves it unset, per model:
# multilingual-e5-small puts an off-topic question in Cyrillic well under its floor, and a
# real one often shares no word with its English answer; one in Chinese near everything
# (docs/multilingual.md, "Abstain per language").
MODEL_SCRIPT_MARGINS: dict[str, dict[str, float]] = {
    "all-MiniLM-L6-v2": {},
    "multilingual-e5-small": {"cyrillic": 0.0, "cjk": 0.04},
}
for _same in ("intfloat/multilingual-e5-small", "multilingual-e5-small+all-MiniLM-L6-v2"):
    MODEL_SCRIPT_MARGINS[_same] = MODEL_SCRIPT_MARGINS["multilingual-e5-small"]
# Two questions at least this close are one entry of the moderators' report ("nothing
# matches", grouped by meaning: indexer/moderation/report.py), per model. Measured on 8
# paraphrase pairs and 8 near misses (the same opening, another subject; tests/indexer/
# moderation/test_report.py): the lowest paraphrase and the highest near miss were
# 0.64 and 0.58 for all-MiniLM-L6-v2, 0.90 and 0.92 for e5, 0.73 and 0.78 for the pair.
# Where they overlap the cut keeps the near misses apart: a paraphrase listed twice
# misleads a moderator less than two questions counted as one.
MODEL_SAME_QUESTION = {
    "all-MiniLM-L6-v2": 0.62,
    "multilingual-e5-small": 0.93,
    "multilingual-e5-small+all-MiniLM-L6-v2": 0.8,
}
MODEL_SAME_QUESTION["intfloat/multilingual-e5-small"] = MODEL_SAME_QUESTION["multilingual-e5-small"]
# Seconds of a 2-core machine to embed one chat message again (a rebuild after a change
# of model: its time estimate), per model: the Ubuntu dev chat's import, 11,644 messages,
# took 34 s with all-MiniLM-L6-v2, 157 s with multilingual-e5-small, 177 s with both
# (docs/multilingual.md). A pair costs its two models'; an unknown model the slowest's.
MODEL_SECONDS_PER_MESSAGE = {"all-MiniLM-L6-v2": 0.003, "multilingual-e5-small": 0.0135}


def rebuild_estimate_s(model: str, messages: int) -> float:
    """About how long re-embedding `messages` with `model` (any spelling: the config's
    name or the embedder's, `org/name`, a pair joined by `+`) takes, in seconds."""
    slowest = max(MODEL_SECONDS_PER_MESSAGE.values())
    parts = [p.rsplit("/", 1)[-1] for p in model.split("+")]
    return messages * sum(MODEL_SECONDS_PER_MESSAGE.get(p, slowest) for p in parts)
