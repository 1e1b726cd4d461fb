"""What the wheel needs, checked in seconds (scripts/check-wheel checks it for real in a
fresh venv, in CI): every third-party import is a declared dependency, the templates
are package data, and the README's deployment commands are the ones CI runs."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEMO_ONLY = {"appservice/tools/chatclient.py"}  # the demo's Matrix client: the `demo` extra


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower().replace("_", "-")


def imports(path: Path) -> set[str]:
    """Top-level names of every absolute import, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_every_third_party_import_is_declared():
    project = PYPROJECT["project"]
    declared = {_name(r) for r in project["dependencies"]}
    demo = {_name(r) for r in project["optional-dependencies"]["demo"]}
    dists = packages_distributions()
    missing = []
    for path in sorted((ROOT / "appservice").rglob("*.py")) + sorted(
        (ROOT / "indexer").rglob("*.py")
    ):
        rel = str(path.relative_to(ROOT))
        allowed = declared | (demo if rel in DEMO_ONLY else set())
        for mod in imports(path):
            if mod in sys.stdlib_module_names or mod in ("appservice", "indexer", "__future__"):
                continue
            names = {d.lower().replace("_", "-") for d in dists.get(mod, [mod])}
            if not names & allowed:
                missing.append(f"{rel}: {mod} ({', '.join(sorted(names))})")
    assert missing == []


def test_every_package_is_in_the_wheel():
    """pyproject lists the packages (packages.find would drop the templates' mapping), so a
    package folder added under appservice/ or indexer/ must be listed there too."""
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("appservice", "indexer")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert "matrix_sources.indexer.store" in on_disk  # the folders are really read
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == on_disk | {
        "matrix_sources_templates"
    }


def test_templates_are_package_data():
    tool = PYPROJECT["tool"]["setuptools"]
    assert "matrix_sources_templates" in tool["packages"]
    assert tool["package-dir"]["matrix_sources_templates"] == "config"
    assert (ROOT / "config" / "__init__.py").exists()  # a regular package, a real path
    assert "*.yaml" in tool["package-data"]["matrix_sources_templates"]
    from matrix_sources.indexer.datadir import _template

    assert "homeserver:" in _template("config.example.yaml")
    assert "rooms:" in _template("allowlist.example.yaml")


def test_readme_deployment_is_what_ci_runs():
    section = (ROOT / "README.md").read_text().split("## Running it beside your Synapse\n")[1]
    install = section.split("```\n", 2)[1]
    for command in (
        "python3 -m venv",
        "pip install torch==2.13.0",
        "pip wheel --no-deps",
        "pip install -c constraints.txt dist/matrix_sources-*.whl",
        "matrix-sources init",
    ):
        assert command in install
    assert "matrix-sources doctor -c" in section.split("\n## ")[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test -q" in ci and "./scripts/check-wheel" in ci
    assert "README.md" in (ROOT / "scripts" / "check-wheel").read_text()
