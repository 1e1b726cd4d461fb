"""Shared by the performance benchmarks (ingest, live, query): the machine and library
versions, percentiles, peak RSS, a fresh data dir with the eval rooms on its allowlist,
and an embedder wrapper that records what the pipeline embedded.

Figures are printed, and written as JSON under bench/out/; nothing here asserts a time.
The eval data is located by bench/evalkit.py (--eval-dir, $MATRIX_SOURCES_EVAL_DIR, or
../shared/eval/ubuntu-irc) and read where it lies, never copied into the repository.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import evalkit

SPLITS = ("dev", "test")


def quiet_env() -> None:
    """What the CLI sets before it loads anything (appservice/cli/main.py)."""
    for k, v in (
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("ANONYMIZED_TELEMETRY", "False"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(k, v)


def machine() -> dict:
    """nproc, CPU model, RAM, and the versions that decide the figures."""
    info = evalkit.machine()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    info["nproc"] = len(os.sched_getaffinity(0))
    for mod in ("torch", "chromadb", "sentence_transformers"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - a missing library is reported, not fatal
            info[mod] = None
    info["libc"] = " ".join(platform.libc_ver())
    info["glibc_tunables"] = os.environ.get("GLIBC_TUNABLES", "")
    return info


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks; nan if empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary_ms(seconds: Sequence[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 1),
        "p95_ms": round(pct(ms, 95), 1),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else None,
        "max_ms": round(max(ms), 1) if ms else None,
    }


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS) and friends of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM", "VmSize", "VmPeak", "Threads")):
            key, _, val = line.partition(":")
            out[key] = int(val.split()[0])
    return out


def evict_page_cache(roots: Sequence[Path]) -> int:
    """Every file under `roots` dropped from the page cache (written out first), as after
    a reboot, without root (posix_fadvise DONTNEED; /proc/sys/vm/drop_caches needs it).
    Bytes of the files evicted."""
    os.sync()
    total = 0
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:  # a socket, a dangling link
                    continue
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    total += os.fstat(fd).st_size
                finally:
                    os.close(fd)
    return total


def fresh_data_dir(
    data_dir: Path,
    rooms: Sequence[str],
    homeserver_url: str = "http://127.0.0.1:8008",
    as_port: int | None = None,
    settings: dict | None = None,
) -> Path:
    """A new data dir (removed first) as `matrix-sources init` makes it, the rooms on its
    allowlist, `settings` (dotted keys) applied to config.yaml; returns config.yaml."""
    from matrix_sources.indexer.datadir import init_data_dir

    if data_dir.exists():
        shutil.rmtree(data_dir)
    init_data_dir(data_dir, homeserver_url, "localhost", as_port=as_port)
    (data_dir / "allowlist.yaml").write_text(
        "rooms:\n" + "".join(f"  - '{r}'\n" for r in rooms), encoding="utf-8"
    )
    config = data_dir / "config.yaml"
    if settings:
        apply_settings(config, settings)
    return config


def apply_settings(config: Path, settings: dict) -> None:
    """Set dotted keys ("index.debounce_seconds") in a config.yaml, keeping its comments."""
    from ruamel.yaml import YAML

    y = YAML()
    data = y.load(config.read_text(encoding="utf-8"))
    for key, value in settings.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    with open(config, "w", encoding="utf-8") as f:
        y.dump(data, f)


def parse_settings(pairs: Sequence[str]) -> dict:
    """KEY=VALUE (dotted keys, YAML values) from repeated --set options."""
    from ruamel.yaml import YAML

    out = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        out[key] = YAML(typ="safe").load(raw)
    return out


def eval_rooms(root: Path, splits: Sequence[str] = SPLITS) -> list[str]:
    return [r for s in splits for r in evalkit.room_ids(root / s)]


@dataclass
class RecordingEmbedder:
    """The real embedder, recording every call the pipeline made: its texts (in memory
    only, for the bare run beside it) and the seconds spent in encode."""

    inner: object
    calls: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.name = self.inner.name
        self.dim = self.inner.dim
        self.backend = self.inner.backend

    def encode(self, texts):
        t = time.perf_counter()
        out = self.inner.encode(texts)
        self.seconds += time.perf_counter() - t
        self.calls.append(list(texts))
        return out

    @property
    def texts(self) -> list[str]:
        return [t for c in self.calls for t in c]


def write_report(name: str, report: dict, out: str | None = None) -> Path:
    path = Path(out) if out else evalkit.OUT_DIR / f"{name}.json"
    evalkit.write_json(path, report)
    return path


def attribution(root: Path) -> str:
    return evalkit.attribution(root)


def dumps(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)
