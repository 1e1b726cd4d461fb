"""`matrix-sources`: the command line. Each subcommand is a small function; the work is
done by `indexer/` and `appservice/service.py`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from indexer.config import Config, ConfigError, load_config

EXIT_USAGE = 2


def _config(args) -> Config:
    return load_config(Path(args.config))


def _quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cmd_init(args) -> int:
    from indexer.datadir import InitError, init_data_dir

    try:
        paths = init_data_dir(Path(args.data_dir), args.homeserver_url, args.domain,
                              args.force, args.port)
    except InitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"wrote {p}")
    reg = paths[2].resolve()
    print(f"\nNext: add {reg} to app_service_config_files in homeserver.yaml, restart "
          f"Synapse, then: matrix-sources run -c {paths[0]}")
    return 0


def cmd_run(args) -> int:
    from .logs import setup_logging
    from .service import Service, StartupError

    cfg = _config(args)
    setup_logging(cfg.log_level, as_json=args.json_logs)

    async def main() -> int:
        service = Service(cfg)
        try:
            await service.start()
        except StartupError as e:
            print(f"error: {e}", file=sys.stderr)
            await service.stop()
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"matrix-sources: serving on {cfg.as_host}:{cfg.as_port} as {cfg.bot_user}",
              file=sys.stderr, flush=True)
        await stop.wait()
        await service.stop()
        return 0

    return asyncio.run(main())


def cmd_import(args) -> int:
    from tqdm import tqdm

    from indexer.components import Index
    from indexer.importer import import_events

    cfg = _config(args)
    path = Path(args.file)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 1
    index = Index.open(cfg)
    size = sum(1 for _ in open(path, "rb"))
    show = not args.quiet
    with tqdm(total=size, desc="reading", unit="ev", disable=not show) as read_bar, \
            tqdm(desc="indexing", unit="msg", disable=not show) as index_bar:
        summary = import_events(path, index.ingest, index.pipeline,
                                on_read=read_bar.update, on_indexed=index_bar.update)
    index.close()
    for line in summary.lines():
        print(line)
    return 0


def cmd_search(args) -> int:
    from .searchcli import run_search

    return run_search(_config(args), args)


def cmd_allowlist(args) -> int:
    from indexer.allowlist import add_room, load_allowlist, remove_room

    cfg = _config(args)
    if args.action == "list":
        for room in load_allowlist(cfg.allowlist):
            print(room)
        return 0
    for room in args.rooms:
        if args.action == "add":
            changed = add_room(cfg.allowlist, room, args.comment)
            print(f"{'added' if changed else 'already listed'}: {room}")
        else:
            changed = remove_room(cfg.allowlist, room)
            print(f"{'removed' if changed else 'not listed'}: {room}")
    return 0


def cmd_journal(args) -> int:
    from indexer.journal import Journal

    cfg = _config(args)
    for entry in Journal(cfg.journal_path).read(room=args.room, rule=args.rule):
        print(json.dumps(entry, ensure_ascii=False, sort_keys=True))
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(Path(args.data_dir), serve=not args.no_serve)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="matrix-sources", description=(
        "Make a Matrix community's public rooms searchable by meaning."))
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp):
        sp.add_argument("-c", "--config", required=True, help="DIR/config.yaml")
        return sp

    sp = sub.add_parser("init", help="write config, allowlist and registration into a data dir")
    sp.add_argument("--data-dir", required=True)
    sp.add_argument("--homeserver-url", default="http://127.0.0.1:8008")
    sp.add_argument("--domain", default="localhost", help="the homeserver's server_name")
    sp.add_argument("--port", type=int, default=None, help="appservice port (default 29316)")
    sp.add_argument("--force", action="store_true", help="overwrite existing files")
    sp.set_defaults(func=cmd_init)

    sp = with_config(sub.add_parser("run", help="serve the appservice"))
    sp.add_argument("--json-logs", action="store_true", help="one JSON object per log line")
    sp.set_defaults(func=cmd_run)

    sp = with_config(sub.add_parser("import", help="import Matrix events from a JSONL file"))
    sp.add_argument("file")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sp.set_defaults(func=cmd_import)

    sp = with_config(sub.add_parser("search", help="search the index (as !sources does)"))
    sp.add_argument("texts", nargs="*", help="one or more texts, fused into one ranking")
    sp.add_argument("--top", type=int, default=None)
    sp.add_argument("--room", default=None)
    sp.add_argument("--corpus", default=None)
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--queries", default=None, help="batch mode: a JSONL file of queries")
    sp.set_defaults(func=cmd_search)

    al = sub.add_parser("allowlist", help="list, add or remove indexed rooms")
    alsub = al.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add rooms"), ("remove", "remove rooms")):
        sp = with_config(alsub.add_parser(action, help=text))
        sp.add_argument("rooms", nargs="+", metavar="ROOM_ID")
        if action == "add":
            sp.add_argument("--comment", default=None, help="a note kept beside the id")
        sp.set_defaults(func=cmd_allowlist)
    sp = with_config(alsub.add_parser("list", help="print the listed room ids"))
    sp.set_defaults(func=cmd_allowlist)

    sp = with_config(sub.add_parser("journal", help="print refusals and exclusions"))
    sp.add_argument("--room", default=None)
    sp.add_argument("--rule", default=None)
    sp.set_defaults(func=cmd_journal)

    sp = sub.add_parser("demo", help="a local Synapse, the service and a demo room")
    sp.add_argument("--data-dir", default="demo-data")
    sp.add_argument("--no-serve", action="store_true",
                    help="stop after the first answer instead of serving")
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
