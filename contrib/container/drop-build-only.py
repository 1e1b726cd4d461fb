"""Uninstall the named distributions from this venv, and every distribution that only
they needed: what matrix-sources requires without them (its extras' markers and the
extras it asks of others evaluated) stays.

    python3 drop-build-only.py torch sentence-transformers

The image's build stage runs it after the model's ONNX export (Containerfile): torch
and sentence-transformers only make that export; the service runs it with ONNX Runtime.
Distribution names only, no module paths, so it survives the code moving.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distributions

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "matrix-sources"
TOOLS = {"pip", "setuptools", "wheel"}


def needed(installed: dict, dropped: set[str]) -> set[str]:
    """The distributions ROOT requires, transitively, none of `dropped` followed."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(ROOT, frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name not in installed:
            continue
        seen.add((name, extras))
        for line in installed[name].requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                continue
            dep = canonicalize_name(req.name)
            if dep not in dropped:
                todo.append((dep, frozenset(req.extras)))
    return {name for name, _ in seen}


def main(names: list[str]) -> int:
    installed = {canonicalize_name(d.metadata["Name"]): d for d in distributions()}
    if ROOT not in installed:
        sys.exit(f"{ROOT} is not installed in {sys.prefix}")
    dropped = {canonicalize_name(n) for n in names}
    keep = needed(installed, dropped) | TOOLS
    remove = sorted(set(installed) - keep)
    print(f"dropping {len(remove)} distributions: {' '.join(remove)}", flush=True)
    if remove:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *remove], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
