"""What the Containerfile promises, checked in milliseconds (scripts/container-check
builds and runs it for real, in CI): the version label is pyproject's, pip's build-time
settings never reach the runtime stage, and the user, volume, entrypoint and command
are the ones the README and docs/deployment.md give."""

from __future__ import annotations

import re
import tomllib

from tests.paths import ROOT

CONTAINERFILE = (ROOT / "Containerfile").read_text()
RUNTIME = CONTAINERFILE.rsplit("\nFROM ", 1)[1]  # the last stage: what the image is


def test_the_version_label_is_pyprojects():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.search(r"^ARG VERSION=(\S+)$", CONTAINERFILE, re.M).group(1) == version
    assert 'org.opencontainers.image.version="${VERSION}"' in RUNTIME


def test_pips_build_settings_stay_in_the_build_stage():
    """PIP_CERT and PIP_FIND_LINKS are paths mounted into the build: declared where pip
    runs, never in the runtime stage, whose only files from the context are its own."""
    build = CONTAINERFILE.split("\nFROM ", 2)[1]
    for arg in ("PIP_CERT", "PIP_FIND_LINKS"):
        assert f"ARG {arg}\n" in build
        assert arg not in RUNTIME
    copies = re.findall(r"^COPY (.*)$", RUNTIME, re.M)
    assert all(
        c.startswith("--from=build ") or c.startswith("contrib/container/") for c in copies
    ), copies
    # No RUN: a build's -v mounts would leave their (empty) mount points in its layer.
    assert not re.search(r"^RUN ", RUNTIME, re.M)


def test_user_volume_entrypoint_and_command():
    readme = (ROOT / "README.md").read_text()
    uid, gid = re.search(r"^USER (\d+):(\d+)$", RUNTIME, re.M).groups()
    assert f"uid {uid}, gid {gid}" in readme
    assert "VOLUME /data" in RUNTIME
    assert 'ENTRYPOINT ["matrix-sources"]' in RUNTIME
    assert 'CMD ["run", "-c", "/data/config.yaml"]' in RUNTIME
    assert "HEALTHCHECK " in RUNTIME and "healthcheck.py" in RUNTIME
