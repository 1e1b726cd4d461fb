"""The version an admin reads: `matrix-sources --version` prints the installed one, and
pyproject.toml, CHANGELOG.md and the image's label (Containerfile) give the same."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_prints_the_installed_version():
    done = subprocess.run(
        [sys.executable, "-m", "matrix_sources.appservice.cli.main", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"matrix-sources {version('matrix-sources')}\n"


def test_version_is_0x_and_the_changelog_starts_with_it():
    """0.x while config.yaml may still change; CHANGELOG.md's first release is this one,
    and says what an admin must change when upgrading."""
    v = pyproject_version()
    assert re.fullmatch(r"0\.\d+\.\d+", v), v
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)", changelog, re.M)
    assert releases and releases[0] == v, releases
    first = changelog.split(f"## {v}", 1)[1].split("\n## ", 1)[0]
    assert "### Upgrading" in first
