"""scripts/container-check's body (read its header): build the image, run it beside a
throwaway Synapse, ask it a `!sources`. Run by that script, with .venv's Python."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from matrix_sources.appservice.tools.chatclient import ChatClient  # noqa: E402
from matrix_sources.appservice.tools.localsynapse import LocalSynapse  # noqa: E402
from tests.harness import free_port  # noqa: E402

BASE = "localhost/matrix-sources-base:bookworm"
IMAGE = "localhost/matrix-sources:ci"
UID = "10001:10001"  # the image's user (Containerfile)
STORE = Path(os.environ.get("MATRIX_SOURCES_PODMAN_ROOT", "/var/tmp/matrix-sources-podman"))
PODMAN = ["podman", "--root", str(STORE / "root"), "--runroot", str(STORE / "runroot")]
RUN = [
    *PODMAN,
    "run",
    "--runtime",
    "runc",
    "--network",
    "host",
    "--ulimit",
    "nofile=20000:20000",
    "--ulimit",
    "nproc=32768:32768",
]
READY_GOAL_S = 15
SIZE_GOAL = 1.2 * 2**30
VERSION = tomllib.loads(Path("pyproject.toml").read_text())["project"]["version"]
STARTED = time.monotonic()

# The conversation: a question, its answer (a reply), and something else.
QUESTION = "The homeserver ran out of disk again, media uploads failed. What can we clean up?"
ANSWER = (
    "Most of it is the remote media cache: set remote_media_lifetime: 30d under "
    "media_retention in homeserver.yaml and Synapse purges old copies."
)
OTHER = "Separate topic: the meetup in March is at the library, second Saturday."
ASK = "!sources the server disk is full of media, how do I clean it up?"


def say(text: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {text}", flush=True)


def podman(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    res = subprocess.run([*PODMAN, *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        sys.exit(
            f"container-check: podman {' '.join(args)} failed ({res.returncode}):\n"
            f"{res.stdout[-3000:]}{res.stderr[-3000:]}"
        )
    if not quiet and res.returncode == 0 and res.stdout.strip():
        print(res.stdout.strip()[-2000:], flush=True)
    return res


def run(*args: str) -> subprocess.CompletedProcess:
    """`podman run` with this machine's settings; the healthcheck's systemd timer off
    (no systemd here): `podman healthcheck run` asks it instead."""
    return subprocess.run(
        [*RUN, "--health-interval", "disable", *args], capture_output=True, text=True
    )


def make_base() -> None:
    if podman("image", "exists", BASE, check=False).returncode == 0:
        say(f"base {BASE}: already in {STORE}")
        return
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="container-check-base-") as tmp:
        tar = Path(tmp) / "bookworm.tar"
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(tar),
            ],
            check=True,
        )
        podman("import", str(tar), BASE, quiet=True)
    say(f"base {BASE} made with mmdebstrap in {time.monotonic() - t0:.0f} s")


def pip_settings() -> dict[str, str]:
    """cert and find-links as pip here reads them (its config files and environment:
    `pip config list`), the first of each."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = re.fullmatch(r"[^=]*\.(cert|find-links)='(.*)'", line.strip())
        if m:
            found.setdefault(m.group(1), m.group(2))
    for key, var in (("cert", "PIP_CERT"), ("find-links", "PIP_FIND_LINKS")):
        if os.environ.get(var):
            found[key] = os.environ[var]
    return found


def build() -> None:
    """The image, with pip's CA bundle and wheel folders mounted read-only."""
    args = [
        "build",
        "--format",
        "docker",
        "--runtime",
        "runc",
        "--network",
        "host",
        "--build-arg",
        f"BASE={BASE}",
        "-t",
        IMAGE,
        "-f",
        "Containerfile",
    ]
    pip = pip_settings()
    if pip.get("cert"):
        args += [
            "-v",
            f"{pip['cert']}:/run/pip/ca.crt:ro",
            "--build-arg",
            "PIP_CERT=/run/pip/ca.crt",
        ]
    links, local_torch = [], False
    for i, link in enumerate(pip.get("find-links", "").split()):
        if "://" in link and not link.startswith("file://"):
            links.append(link)
            continue
        path = Path(link.removeprefix("file://"))
        if path.is_dir():
            args += ["-v", f"{path}:/run/pip/links{i}:ro"]
            links.append(f"/run/pip/links{i}")
            local_torch |= any(path.glob("torch-*+cpu-*.whl"))
    if links:
        args += ["--build-arg", f"PIP_FIND_LINKS={' '.join(links)}"]
    if local_torch:  # PyTorch's own index is out of reach here; the wheel is at hand
        args += ["--build-arg", "TORCH_INDEX="]
    t0 = time.monotonic()
    say("$ podman " + shlex.join(args + ["."]))
    res = subprocess.run([*PODMAN, *args, "."], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"container-check: the build failed:\n{(res.stdout + res.stderr)[-6000:]}")
    say(f"built {IMAGE} in {time.monotonic() - t0:.0f} s")
    podman("image", "prune", "-f", quiet=True)  # earlier builds' layers: GBs each


def check_image() -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE, quiet=True).stdout)
    labels = json.loads(
        podman("image", "inspect", "--format", "{{json .Config.Labels}}", IMAGE, quiet=True).stdout
    )
    health = podman(
        "image", "inspect", "--format", "{{json .Config.Healthcheck}}", IMAGE, quiet=True
    ).stdout
    say(f"image size {size / 2**30:.2f} GiB ({size:,} bytes; goal {SIZE_GOAL / 2**30:.1f} GiB)")
    assert size <= SIZE_GOAL, "the image is over its size goal"
    assert labels.get("org.opencontainers.image.version") == VERSION, labels
    assert "/health" in health, health
    done = run("--rm", IMAGE, "--version")
    assert done.stdout.strip() == f"matrix-sources {VERSION}", done.stdout + done.stderr
    # pip's cert and wheels were mounted at /run/pip in the build: nothing of them here.
    left = run("--rm", "--entrypoint", "sh", IMAGE, "-c", "ls -d /run/pip 2>/dev/null; env")
    assert "/run/pip" not in left.stdout and "PIP_" not in left.stdout, left.stdout


def one_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert done.returncode != 0 and len(lines) == 1, done.stdout + done.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    say(f"  {lines[0]}")


def check_bad_input(tmp: Path) -> None:
    empty = tmp / "empty"
    empty.mkdir()
    shutil.chown(empty, 10001, 10001)
    say("an empty /data: run says to run init first")
    one_error(
        run("--rm", "-v", f"{empty}:/data", IMAGE),
        "/data/config.yaml",
        "run init first",
        "init --data-dir /data --homeserver-url",
    )
    theirs = tmp / "roots"
    theirs.mkdir(mode=0o755)
    say("a /data owned by root: init names the uid and the fix")
    one_error(
        run("--rm", "-v", f"{theirs}:/data", IMAGE, "init", "--data-dir", "/data"),
        "not writable by uid 10001",
        "chown -R 10001:10001",
    )


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {}
    except OSError:
        return 0, {}


def start(name: str, data: Path, port: int) -> float:
    """The container's default command on `data`; seconds from `podman run` to /health 200."""
    t0 = time.monotonic()
    done = run("-d", "--name", name, "-v", f"{data}:/data", IMAGE)
    assert done.returncode == 0, done.stderr
    while health(port)[0] != 200:
        state = podman("inspect", "--format", "{{.State.Status}}", name, quiet=True).stdout
        if state.strip() != "running" or time.monotonic() - t0 > 180:
            logs = podman("logs", name, check=False, quiet=True)
            sys.exit(
                f"container-check: not ready ({state.strip()}):\n"
                f"{(logs.stdout + logs.stderr)[-4000:]}"
            )
        time.sleep(0.1)
    return time.monotonic() - t0


def stop(name: str) -> float:
    """SIGTERM (podman stop, 10 s before SIGKILL); seconds until it exited, and exit 0."""
    t0 = time.monotonic()
    podman("stop", "-t", "10", name, quiet=True)
    took = time.monotonic() - t0
    code = podman("inspect", "--format", "{{.State.ExitCode}}", name, quiet=True).stdout
    assert code.strip() == "0", f"exit code {code.strip()} on SIGTERM"
    return took


async def ask_in_a_room(hs: LocalSynapse, name: str, bot: str) -> str:
    """A public room with a question and its answer, allowlisted from inside the
    container; then `!sources` until its reply cites the answer (indexing takes a
    moment); the reply's text."""
    alice_id, alice_token = hs.register_user("alice", "alice-password")
    bob_id, bob_token = hs.register_user("bob", "bob-password")
    async with (
        ChatClient(hs.url, alice_id, alice_token) as alice,
        ChatClient(hs.url, bob_id, bob_token) as bob,
    ):
        room = await alice.create_room("container check", public=True)
        await bob.join(room)
        added = subprocess.run(
            [
                *PODMAN,
                "exec",
                name,
                "matrix-sources",
                "allowlist",
                "add",
                "-c",
                "/data/config.yaml",
                room,
            ],
            capture_output=True,
            text=True,
        )
        assert added.returncode == 0, added.stdout + added.stderr
        await alice.wait_for_member(room, bot, timeout=60)
        question = await alice.send(room, QUESTION)
        await bob.send(
            room,
            ANSWER,
            {
                "msgtype": "m.text",
                "body": ANSWER,
                "m.relates_to": {"m.in_reply_to": {"event_id": question}},
            },
        )
        await alice.send(room, OTHER)
        deadline = time.monotonic() + 120
        while True:
            reply = await alice.ask(room, ASK, bot, timeout=60)
            body = reply["content"]["body"]
            if "remote_media_lifetime" in body or time.monotonic() > deadline:
                return body
            await asyncio.sleep(2)


def check_logs(name: str, data: Path) -> None:
    logs = podman("logs", name, quiet=True)
    lines = [ln for ln in logs.stdout.splitlines() if ln.strip()]
    events = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert events and all("event" in e for e in events), logs.stdout[-2000:]
    assert not [e for e in events if e["event"].startswith("onnx_")], "exported at start"
    assert not (data / "models").exists(), "the first start made an export in /data"
    say(f"logs: {len(events)} JSON lines on stdout, no ONNX export at start")


def main() -> int:
    STORE.mkdir(parents=True, exist_ok=True)
    make_base()
    build()
    check_image()
    name = f"matrix-sources-check-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="container-check-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        check_bad_input(tmp)
        data = tmp / "data"
        data.mkdir()
        shutil.chown(data, 10001, 10001)
        hs_port, as_port = free_port(), free_port()
        say("init in the container")
        done = run(
            "--rm",
            "-v",
            f"{data}:/data",
            IMAGE,
            "init",
            "--data-dir",
            "/data",
            "--homeserver-url",
            f"http://127.0.0.1:{hs_port}",
            "--domain",
            "localhost",
            "--port",
            str(as_port),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert (data / "registration.yaml").stat().st_uid == 10001
        try:
            with LocalSynapse(
                tmp / "synapse", port=hs_port, appservice_registrations=[data / "registration.yaml"]
            ) as hs:
                say(f"Synapse on {hs.url}; starting the container")
                ready = start(name, data, as_port)
                say(
                    f"ready in {ready:.1f} s after `podman run` (goal {READY_GOAL_S} s), "
                    "a fresh data dir"
                )
                checked = podman("healthcheck", "run", name, check=False, quiet=True)
                assert checked.returncode == 0, checked.stdout + checked.stderr
                say("healthcheck: healthy")
                body = asyncio.run(ask_in_a_room(hs, name, "@sourcesbot:localhost"))
                assert "remote_media_lifetime" in body, f"!sources did not cite it:\n{body}"
                say("!sources answered, citing the answer")
                check_logs(name, data)
                took = stop(name)
                say(f"SIGTERM: stopped in {took:.1f} s, exit 0")
                podman("rm", name, quiet=True)
                ready_again = start(name, data, as_port)
                say(f"ready in {ready_again:.1f} s after `podman run` on the small data dir")
                stop(name)
        finally:
            podman("rm", "-f", name, check=False, quiet=True)
    worst = max(ready, ready_again)
    say(
        f"container-check: ok ({VERSION}; ready in {ready:.1f} s / {ready_again:.1f} s"
        f"{'' if worst <= READY_GOAL_S else ', OVER THE GOAL on this load'}) in "
        f"{time.monotonic() - STARTED:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
