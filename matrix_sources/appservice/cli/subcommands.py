"""Each subcommand's front: the config `-c` names read (and, for a command that writes
the data dir, that this process can), then the subcommand's own module called
(serve.py, importing.py, allowlist.py, search.py...). main.py's parser names these."""

from __future__ import annotations

import sys
from pathlib import Path

from matrix_sources.indexer.config import Config, load_config

from .access import NotWritable, check_writable


def _config(args, writes: bool = False) -> Config:
    """The config `-c` names; with `writes`, for a command that writes the data dir, also
    refused (NotWritable) when this process cannot."""
    from .progress import config_path

    cfg = load_config(config_path(args.config))
    if writes:
        check_writable(cfg.data_dir)
    return cfg


def cmd_init(args) -> int:
    from matrix_sources.indexer.datadir import InitError, init_data_dir

    try:
        check_writable(Path(args.data_dir))
        paths = init_data_dir(
            Path(args.data_dir),
            args.homeserver_url,
            args.domain,
            args.force,
            args.port,
            synapse_group=args.synapse_group,
            credentials_dir=args.credentials_dir and Path(args.credentials_dir),
        )
    except (InitError, NotWritable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"wrote {p}")
    reg = paths[2].resolve()
    if args.synapse_group:
        print(f"\n{reg} is mode 0640, group {args.synapse_group}: Synapse reads it, others cannot.")
    else:
        print(
            f"\n{reg} is mode 0600: if Synapse runs as another user, give it the file "
            f"(chgrp SYNAPSE_GROUP {reg} && chmod 0640 {reg}; or init --synapse-group)."
        )
    print(
        f"Next: add {reg} to app_service_config_files in homeserver.yaml, restart "
        f"Synapse, then: matrix-sources run -c {paths[0]}"
    )
    return 0


def cmd_run(args) -> int:
    from .serve import run_service

    return run_service(_config(args, writes=True), args.json_logs)


def cmd_import(args) -> int:
    from .importing import run_import

    return run_import(_config(args, writes=True), Path(args.file), args.quiet)


def cmd_search(args) -> int:
    from .search import run_search

    return run_search(_config(args), args)


def cmd_mcp(args) -> int:
    from .mcptool import run_mcp

    return run_mcp(_config(args))


def cmd_allowlist(args) -> int:
    from .allowlist import run_allowlist

    return run_allowlist(_config(args), args)


def cmd_journal(args) -> int:
    from .journal import run_journal

    return run_journal(_config(args), args.room, args.rule, args.kind)


def cmd_backfill(args) -> int:
    from .backfill import run_backfill

    return run_backfill(_config(args, writes=True), args.rooms, args.quiet)


def cmd_forget(args) -> int:
    from .forget import run_forget

    if bool(args.user) + bool(args.list) + bool(args.undo) != 1:
        print("error: give one of USER_ID, --list, --undo USER_ID", file=sys.stderr)
        return 2
    return run_forget(_config(args), args.user, args.list, args.undo)


def cmd_worker(args) -> int:
    from .worker import run_worker

    return run_worker(_config(args, writes=True), args.quiet)


def cmd_eventlog(args) -> int:
    from .eventlog import run_migrate

    return run_migrate(_config(args), args.to, args.quiet)


def cmd_doctor(args) -> int:
    from .doctor import print_checks, run_checks
    from .progress import config_path

    return print_checks(run_checks(config_path(args.config)))


def cmd_report(args) -> int:
    from .report import run_report

    return run_report(_config(args), args.room, args.days, args.json)


def cmd_demo(args) -> int:
    from importlib.util import find_spec

    if find_spec("synapse") is None or find_spec("nio") is None:
        print(
            "error: the demo runs a local Synapse and a Matrix client, which a plain "
            "install leaves out: `pip install -c constraints.txt '.[demo]'` from the "
            "checkout, or run ./scripts/demo",
            file=sys.stderr,
        )
        return 1
    from ..tools.demo import run_demo

    return run_demo(Path(args.data_dir), serve=not args.no_serve)


def cmd_ref(args) -> int:
    from .derived import run_ref

    return run_ref(_config(args), args)


def cmd_verify(args) -> int:
    from .derived import run_verify

    return run_verify(_config(args), args)
