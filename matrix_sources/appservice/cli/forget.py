"""`matrix-sources forget USER_ID | --list | --undo USER_ID`: through the running
service (spool.py) when it holds the data dir's lock, else applied here."""

from __future__ import annotations

import sys

from matrix_sources.indexer.clock import REAL
from matrix_sources.indexer.config import Config
from matrix_sources.indexer.ingest.forget import Forgetting, apply_request
from matrix_sources.indexer.ingest.spool import submit, wait_answer
from matrix_sources.indexer.store.lock import LockedError, WriterLock

ANSWER_TIMEOUT_S = 30.0


def run_forget(cfg: Config, user: str | None, listing: bool, undo: str | None) -> int:
    request = (
        {"op": "list"}
        if listing
        else {"op": "undo", "user_id": undo}
        if undo
        else {"op": "forget", "user_id": user}
    )
    try:
        lock = WriterLock(cfg.data_dir, "matrix-sources forget").acquire()
    except LockedError:
        answer = wait_answer(submit(cfg.data_dir, request), ANSWER_TIMEOUT_S, REAL)
        if answer is None:
            print(
                f"error: the running service did not answer within {ANSWER_TIMEOUT_S:.0f} s;"
                " the request stays queued in the data dir's spool/ and is applied"
                " when it next polls",
                file=sys.stderr,
            )
            return 1
    else:
        try:
            answer = _apply_here(cfg, request)
        finally:
            lock.release()
    return _print(answer)


def _apply_here(cfg: Config, request: dict) -> dict:
    from matrix_sources.indexer.components import Index

    from .progress import load_model

    if request["op"] != "forget":  # the list in the event log: no model, no collection
        from matrix_sources.indexer.ingest.admit import Ingest
        from matrix_sources.indexer.ingest.gate import Gate
        from matrix_sources.indexer.records import UserID
        from matrix_sources.indexer.store.eventlog.log import EventLog
        from matrix_sources.indexer.store.journal import Journal

        eventlog = EventLog(cfg.database)
        try:
            ingest = Ingest(
                Gate(frozenset(), UserID(cfg.bot_user)), eventlog, Journal(cfg.journal_path)
            )
            return apply_request(Forgetting(ingest), request)
        finally:
            eventlog.close()
    index = Index.open(cfg, load_model(cfg))
    try:
        answer = apply_request(Forgetting(index.ingest), request)
        if answer.get("windows"):  # re-chunk without them, then no vector left in a file
            index.pipeline.process_all()
            assert index.pipeline.compaction is not None  # set by Pipeline.__post_init__
            index.pipeline.compaction.now("forget")
        if answer.get("event_ids"):
            answer["note"] = (
                "the service is not running: the bot's answers in the rooms"
                " that quoted them were not edited (run forget with the"
                " service up to edit them)"
            )
        return answer
    finally:
        index.close()


def _print(answer: dict) -> int:
    if "error" in answer:
        print(f"error: {answer['error']}", file=sys.stderr)
        return 1
    if answer["op"] == "list":
        for user in answer["users"]:
            print(user)
        if not answer["users"]:  # said apart from stdout, which a script reads as the list
            print("nobody is forgotten", file=sys.stderr)
        return 0
    if answer["op"] == "undo":
        print(
            f"undone: {answer['user_id']}: messages sent from now on are indexed; the old"
            " ones are not restored"
            if answer["undone"]
            else f"not forgotten: {answer['user_id']}"
        )
        return 0
    print(
        f"forgotten: {answer['user_id']}: {answer['messages']} messages removed,"
        f" {answer['windows']} windows re-chunked; future messages are not indexed"
    )
    if answer.get("note"):
        print(answer["note"])
    return 0
