"""The first mistakes of a container deployment, said in one line with the fix: a data
dir (the volume at /data) this user cannot write, a config.yaml not made yet, a config
asking for torch where the image has none; and where the image's model exports are."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.appservice.cli.main import main
from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.config.sections import MODELS_DIR_ENV
from matrix_sources.indexer.datadir import init_data_dir
from tests.paths import ROOT

NOBODY = 65534


def as_other_user(argv: list[str]) -> subprocess.CompletedProcess:
    """`matrix-sources ARGV` as uid/gid 65534. Run as root (CI), it keeps only the right
    to read and search folders, so the interpreter under /root still starts; it cannot
    write what it does not own."""
    cmd = [sys.executable, "-m", "matrix_sources.appservice.cli.main", *argv]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to run as another user")
        cmd = [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            *cmd,
        ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MATRIX_SOURCES_HEAP_HYGIENE": "0",
    }
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/", env=env)


def owned_by_someone_else(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)  # root's: the other user may read it, not write it
        path.chmod(0o755)
    else:
        path.chmod(0o555)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    assert lines[0].startswith("error: ")
    return lines[0]


def test_init_into_a_folder_it_cannot_write_names_the_uid_and_the_chown(tmp_path):
    tmp_path.chmod(0o755)
    data = tmp_path / "data"
    owned_by_someone_else(data)
    done = as_other_user(["init", "--data-dir", str(data), "--domain", "example.org"])
    assert done.returncode == 1
    line = one_error_line(done)
    uid = NOBODY if os.geteuid() == 0 else os.getuid()
    assert f"not writable by uid {uid}" in line
    assert f"chown -R {uid}:" in line and str(data) in line
    assert not (data / "config.yaml").exists()


def test_run_on_a_data_dir_of_another_user_names_the_uid_and_the_chown(tmp_path):
    """A data dir made by root on the host (init as root), then run as the image's user."""
    tmp_path.chmod(0o755)
    data = tmp_path / "data"
    init_data_dir(data, "http://127.0.0.1:9", "example.org")
    owned_by_someone_else(data)
    done = as_other_user(["run", "-c", str(data / "config.yaml")])
    assert done.returncode == 1
    line = one_error_line(done)
    uid = NOBODY if os.geteuid() == 0 else os.getuid()
    assert f"not writable by uid {uid}" in line and f"chown -R {uid}:" in line


def test_run_without_config_says_to_run_init_first_with_the_command(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for config in (data / "config.yaml", data):  # -c FILE, or -c DIR
        assert main(["run", "-c", str(config)]) == 1
        err = capsys.readouterr().err
        assert "run init first: " in err and "Traceback" not in err
        assert f"matrix-sources init --data-dir {data} --homeserver-url" in err


def test_in_the_image_run_without_config_gives_the_init_to_run_in_the_container(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MATRIX_SOURCES_CONTAINER", "1")
    data = tmp_path / "data"
    data.mkdir()
    assert main(["run", "-c", str(data / "config.yaml")]) == 1
    err = capsys.readouterr().err
    assert f"in a container with the same {data} mounted: init --data-dir {data} " in err


def legacy_config(tmp_path: Path) -> Path:
    """A data dir whose config names its model alone, as before backends: that is torch."""
    init_data_dir(tmp_path / "d", "http://127.0.0.1:9", "example.org")
    path = tmp_path / "d" / "config.yaml"
    y = YAML()
    data = y.load(path.read_text())
    data["index"]["embedder"] = "all-MiniLM-L6-v2"
    with open(path, "w") as f:
        y.dump(data, f)
    return path


def test_a_torch_backend_without_torch_is_refused_naming_the_key_and_the_fix(
    tmp_path, monkeypatch, capsys
):
    path = legacy_config(tmp_path)
    assert load_config(path).index.embedder.backend == "torch"  # torch is here
    monkeypatch.setitem(sys.modules, "torch", None)  # as in the image: not installed
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "index.embedder.backend" in str(e.value) and "backend: onnx-int8" in str(e.value)
    assert main(["doctor", "-c", str(path)]) != 0
    assert "not installed here" in capsys.readouterr().out


def test_models_dir_is_the_images_when_it_says_so(tmp_path, monkeypatch):
    init_data_dir(tmp_path / "d", "http://127.0.0.1:9", "example.org")
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    assert load_config(tmp_path / "d" / "config.yaml").models_dir == tmp_path / "d" / "models"
    monkeypatch.setenv(MODELS_DIR_ENV, "/opt/matrix-sources/models")
    cfg = load_config(tmp_path / "d" / "config.yaml")
    assert cfg.models_dir == Path("/opt/matrix-sources/models")
