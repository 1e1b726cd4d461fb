"""Before a command uses a data dir: is its config.yaml there (else the `init` to run,
as a command to copy), and may this process write the data dir (else the uid it runs
as and the chown that fixes it). These are the first two mistakes of a container
deployment: an empty volume at /data, or a host folder owned by another uid."""

from __future__ import annotations

import os
from pathlib import Path

from matrix_sources.indexer.config import ConfigError

from ..logs import CONTAINER

# What the service only reads in a data dir: these may belong to someone else (root, in
# a hardened install) as long as they can be read.
READ_ONLY = ("config.yaml", "registration.yaml", "allowlist.yaml", "api_token")


class NotWritable(RuntimeError):
    """A data dir this process cannot write; the message is one line with the fix."""


def init_command(data_dir: Path) -> str:
    """The `init` that makes the data dir a config file is missing from."""
    if os.environ.get(CONTAINER) == "1":  # the image's entrypoint is matrix-sources
        return (
            f"run init first, in a container with the same {data_dir} mounted: "
            f"init --data-dir {data_dir} --homeserver-url http://HOMESERVER:8008 "
            "--domain SERVER_NAME"
        )
    return (
        f"run init first: matrix-sources init --data-dir {data_dir} "
        "--homeserver-url http://127.0.0.1:8008 --domain SERVER_NAME"
    )


def missing_config(path: Path) -> ConfigError:
    return ConfigError(path, "", f"no such file; {init_command(path.parent)}")


def check_writable(data_dir: Path) -> None:
    """Raise NotWritable unless this process may create files in `data_dir` (or in the
    folder it will be made in) and write the files it holds, but those it only reads."""
    data_dir = Path(data_dir).absolute()
    target = data_dir
    while not target.exists() and target.parent != target:
        target = target.parent  # init makes the missing folders
    if not target.is_dir():
        return  # not a folder: the command itself says so
    blocked = [target] if not os.access(target, os.W_OK | os.X_OK) else []
    if not blocked and target == data_dir:
        blocked = [
            p
            for p in sorted(data_dir.iterdir())
            if p.name not in READ_ONLY and not os.access(p, os.W_OK)
        ]
    if not blocked:
        return
    first = blocked[0]
    if os.statvfs(first).f_flag & os.ST_RDONLY:
        raise NotWritable(f"{first} is on a read-only mount: mount {data_dir} read-write")
    uid, gid = os.getuid(), os.getgid()
    where = (
        " (in a container: the host folder or volume mounted there)"
        if os.environ.get(CONTAINER) == "1"
        else ""
    )
    raise NotWritable(
        f"{first} is not writable by uid {uid} (gid {gid}), which this runs "
        f"as: chown -R {uid}:{gid} {data_dir}{where}"
    )
