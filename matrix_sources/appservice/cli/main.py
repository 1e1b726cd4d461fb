"""`matrix-sources`: the command line and its parser. Each subcommand is a small front
(subcommands.py) that reads the config and calls its module here (serve.py,
importing.py, allowlist.py, search.py...); the work is done by `indexer/` and
`appservice/homeserver/service.py`."""

from __future__ import annotations

import argparse
import os
import sys

from matrix_sources.indexer.config import ConfigError
from matrix_sources.indexer.store.lock import LockedError

from . import subcommands
from .access import NotWritable


def _quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class _Version(argparse.Action):
    """`--version`: the installed distribution's version (pyproject.toml's), read only
    when asked, so the other commands do not pay for the metadata lookup."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("matrix-sources")
        except PackageNotFoundError:  # a checkout run with PYTHONPATH, never installed
            found = "unknown (not installed: pip install the project)"
        print(f"matrix-sources {found}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="matrix-sources",
        description=("Make a Matrix community's public rooms searchable by meaning."),
    )
    p.add_argument("--version", action=_Version, help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp):
        sp.add_argument(
            "-c",
            "--config",
            required=True,
            metavar="DIR/config.yaml",
            help="the data dir's config.yaml (a data dir means its config.yaml)",
        )
        return sp

    sp = sub.add_parser("init", help="write config, allowlist and registration into a data dir")
    sp.add_argument(
        "--data-dir",
        required=True,
        metavar="DIR",
        help="where the service keeps everything (created if missing)",
    )
    sp.add_argument(
        "--homeserver-url",
        default="http://127.0.0.1:8008",
        help="the homeserver's client-server URL, as the service reaches it (default %(default)s)",
    )
    sp.add_argument("--domain", default="localhost", help="the homeserver's server_name")
    sp.add_argument("--port", type=int, default=None, help="appservice port (default 29316)")
    sp.add_argument("--force", action="store_true", help="overwrite existing files")
    sp.add_argument(
        "--synapse-group",
        default=None,
        metavar="GROUP",
        help="the group Synapse runs as: registration.yaml is then mode 0640 "
        "in that group, so Synapse reads it and others cannot (default: "
        "0600 for whoever runs init)",
    )
    sp.add_argument(
        "--credentials-dir",
        default=None,
        metavar="DIR",
        help="also write the tokens to DIR/as_token and DIR/hs_token (mode "
        "0600), for systemd's LoadCredential= (docs/deployment.md)",
    )
    sp.set_defaults(func=subcommands.cmd_init)

    sp = with_config(sub.add_parser("run", help="serve the appservice"))
    sp.add_argument("--json-logs", action="store_true", help="one JSON object per log line")
    sp.set_defaults(func=subcommands.cmd_run)

    sp = with_config(sub.add_parser("import", help="import Matrix events from a JSONL file"))
    sp.add_argument(
        "file",
        metavar="FILE.jsonl",
        help="Matrix events, one JSON object per line (state and messages)",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sp.set_defaults(func=subcommands.cmd_import)

    sp = with_config(sub.add_parser("search", help="search the index (as !sources does)"))
    sp.add_argument(
        "words",
        nargs="*",
        metavar="WORDS",
        help="the question: every word given is one text, quoted or not",
    )
    sp.add_argument(
        "-t",
        "--text",
        dest="texts",
        action="append",
        default=[],
        metavar="TEXT",
        help="a text of a multi-text query (repeat it, up to 8: "
        "fused into one ranking by search.rrf_k); with neither WORDS nor -t, "
        "standard input gives one text per line",
    )
    sp.add_argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="how many hits (default: search.default_top_k of the config)",
    )
    sp.add_argument(
        "--room",
        default=None,
        metavar="ROOM",
        help="only this allowlisted room: its !id, or the alias kept beside it in allowlist.yaml",
    )
    sp.add_argument(
        "--corpus",
        default=None,
        choices=("chat", "reference"),
        help="only chat windows or only reference sections",
    )
    sp.add_argument("--json", action="store_true", help="one JSON object per hit")
    sp.add_argument(
        "--why",
        type=int,
        default=None,
        metavar="N",
        help="why hit N ranked where it did (as `!sources why N`); after nothing "
        "matches, --why 1 shows the closest message and how far off it was",
    )
    sp.add_argument("--queries", default=None, help="batch mode: a JSONL file of queries")
    sp.set_defaults(func=subcommands.cmd_search)

    sp = with_config(
        sub.add_parser(
            "mcp", help=("serve the search as a Model Context Protocol tool on stdio (for agents)")
        )
    )
    sp.set_defaults(func=subcommands.cmd_mcp)

    al = sub.add_parser("allowlist", help="list, add or remove indexed rooms")
    alsub = al.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add rooms"), ("remove", "remove rooms")):
        sp = with_config(alsub.add_parser(action, help=text))
        sp.add_argument(
            "rooms",
            nargs="+",
            metavar="ROOM_ID" if action == "remove" else "ROOM_ID_OR_ALIAS",
            help="!id:server"
            if action == "remove"
            else "!id:server, or #alias:server (resolved, kept as a comment)",
        )
        if action == "add":
            sp.add_argument("--comment", default=None, help="a note kept beside the id")
        sp.set_defaults(func=subcommands.cmd_allowlist)
    sp = with_config(alsub.add_parser("list", help="print the listed room ids"))
    sp.set_defaults(func=subcommands.cmd_allowlist)

    sp = with_config(sub.add_parser("journal", help="print refusals, purges and exclusions"))
    sp.add_argument(
        "--room",
        default=None,
        metavar="ROOM",
        help="only this room: its id, its alias in allowlist.yaml, or its name",
    )
    sp.add_argument(
        "--rule",
        default=None,
        metavar="RULE",
        help="only this rule (not_public, encrypted_event, ...; a wrong one lists them)",
    )
    sp.add_argument(
        "--kind", default=None, metavar="KIND", help="only refusal, purge or derived_excluded lines"
    )
    sp.set_defaults(func=subcommands.cmd_journal)

    sp = with_config(
        sub.add_parser(
            "backfill",
            help=(
                "read rooms' history (all allowlisted rooms by default) "
                "while the service is stopped"
            ),
        )
    )
    sp.add_argument(
        "rooms",
        nargs="*",
        metavar="ROOM_ID",
        help="allowlisted rooms to read (default: all of them)",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sp.set_defaults(func=subcommands.cmd_backfill)

    sp = with_config(
        sub.add_parser(
            "forget",
            help=(
                "remove everything a user said from the index and refuse their future messages"
                " (works while the service runs)"
            ),
        )
    )
    sp.add_argument("user", nargs="?", metavar="USER_ID", help="@name:server")
    sp.add_argument("--list", action="store_true", help="the users forgotten now")
    sp.add_argument(
        "--undo",
        metavar="USER_ID",
        help="index what USER_ID sends from now on (the old is not restored)",
    )
    sp.set_defaults(func=subcommands.cmd_forget)

    sp = with_config(
        sub.add_parser(
            "worker",
            help=(
                "embed for the service (index.pipeline: external), here or on another machine "
                "that reaches its database and Chroma server"
            ),
        )
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="no start and stop lines")
    sp.set_defaults(func=subcommands.cmd_worker)

    ev = sub.add_parser("eventlog", help="the event log's database")
    evsub = ev.add_subparsers(dest="action", required=True)
    sp = with_config(
        evsub.add_parser(
            "migrate",
            help=(
                "move this data dir's SQLite event log to PostgreSQL, then point store.database "
                "at it (service stopped; nothing re-embedded; run again to resume)"
            ),
        )
    )
    sp.add_argument(
        "--to",
        required=True,
        metavar="postgresql://USER@HOST/DB",
        help="the target database (no password in it: ~/.pgpass or PGPASSFILE)",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sp.set_defaults(func=subcommands.cmd_eventlog)

    sp = with_config(
        sub.add_parser(
            "report",
            help=(
                'per room: questions asked, answered, "nothing matches" (grouped by meaning) and '
                "the votes on the answers (the service running or stopped)"
            ),
        )
    )
    sp.add_argument(
        "--room",
        default=None,
        metavar="ROOM",
        help="only this allowlisted room: its !id, or the alias kept beside it "
        "in allowlist.yaml (default: every room)",
    )
    sp.add_argument(
        "--days",
        type=float,
        default=7.0,
        metavar="N",
        help="the last N days (default %(default)g; at most moderation.keep_days)",
    )
    sp.add_argument(
        "--json",
        action="store_true",
        help=(
            'one JSON object: {"rooms": [{"room_id", "room_label", "asked", "answered", '
            '"nothing_matched", "up", "down", "solved", "unanswered": [{"text", "count", '
            '"event_ids"}]}]}'
        ),
    )
    sp.set_defaults(func=subcommands.cmd_report)

    sp = with_config(sub.add_parser("doctor", help="check the deployment, say how to fix it"))
    sp.set_defaults(func=subcommands.cmd_doctor)

    sp = sub.add_parser("demo", help="a local Synapse, the service and a demo room")
    sp.add_argument(
        "--data-dir",
        default="demo-data",
        metavar="DIR",
        help="where the demo keeps Synapse and the service (default %(default)s); "
        "run again with the same DIR to resume",
    )
    sp.add_argument(
        "--no-serve", action="store_true", help="stop after the first answer instead of serving"
    )
    sp.set_defaults(func=subcommands.cmd_demo)

    ref = sub.add_parser("ref", help="reference corpora: Markdown or text searchable with chat")
    refsub = ref.add_subparsers(dest="action", required=True)
    sp = with_config(refsub.add_parser("add", help="add a folder or file of .md/.txt"))
    sp.add_argument("name", metavar="NAME", help="a name for the corpus, shown in citations")
    sp.add_argument("path", metavar="PATH", help="a folder (every .md, .markdown, .txt) or file")
    sp.set_defaults(func=subcommands.cmd_ref)
    for action, text in (
        ("sync", "read a corpus again: changed sections re-embedded"),
        ("rm", "remove a corpus, its chunks and manifest entries"),
    ):
        sp = with_config(refsub.add_parser(action, help=text))
        sp.add_argument("name", metavar="NAME", help="the corpus (see `ref list`)")
        sp.set_defaults(func=subcommands.cmd_ref)
    sp = with_config(refsub.add_parser("list", help="the corpora, their sections and chunks"))
    sp.set_defaults(func=subcommands.cmd_ref)

    sp = with_config(
        sub.add_parser(
            "verify",
            help=("audit the index; flags combine, none runs every check; exits 1 if one fails"),
        )
    )
    sp.add_argument(
        "--derived-filter",
        action="store_true",
        help="fail naming every indexed window that matches a live artifact",
    )
    sp.add_argument(
        "--exclusions",
        action="store_true",
        help="list derived exclusions with artifact, score and threshold",
    )
    sp.add_argument(
        "--index",
        action="store_true",
        help="every window reachable by its own vector, store and event log "
        "agree; repairs what it can",
    )
    sp.add_argument(
        "--dry-run",
        action="store_true",
        help="with --index: say what would be repaired, change nothing",
    )
    sp.add_argument(
        "--since",
        default=None,
        metavar="T",
        help="with --exclusions: since 30m, 24h, 7d or an ISO date/time",
    )
    sp.set_defaults(func=subcommands.cmd_verify)
    return p


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    args = build_parser().parse_args(argv)
    if argv is None and args.command in ("run", "import", "demo", "worker"):
        # This process is the command: re-execute it with a clean heap (heap.py). Not
        # when called with arguments (tests): that would restart the caller.
        from ..homeserver.heap import ensure_heap_hygiene

        ensure_heap_hygiene()
    try:
        return args.func(args)
    except (ConfigError, LockedError, NotWritable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
