"""One line of `matrix-sources doctor`: what was checked, whether it is fine, the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False  # ok, but worth fixing: printed WARN, not counted a problem
