"""doctor: allowlisted rooms that mostly do not write English, under an English-only
model (issue 45 item 3). Each room's latest messages are read from the event log and
measured (indexer/search/language.py); the share is printed, nothing is stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from matrix_sources.indexer.config import Config
from matrix_sources.indexer.models.ports import EnglishVocabulary
from matrix_sources.indexer.records import RoomID
from matrix_sources.indexer.search.language import PAIR, not_english_share

RECENT = 200  # the latest messages of a room measured
MOSTLY = 0.5  # a room whose measured messages are more than this share not English
MIN_TOLD = 20  # fewer messages with enough words to tell: not judged

COSTS = (
    f"set index.embedder.model: {PAIR} in config.yaml: every message is embedded again "
    "at the next start (about 5 times the English model's time: some 3 minutes for "
    "10,000 messages on 2 cores), and the vectors take twice the memory and disk "
    "(docs/multilingual.md)"
)


def language_warnings(
    cfg: Config, embedder: object, rooms: Iterable[str]
) -> Iterator[tuple[str, str, str]]:
    """(check name, detail, fix) for each room that mostly does not read as English;
    nothing under a model that reads other languages."""
    if not isinstance(embedder, EnglishVocabulary):
        return
    from matrix_sources.indexer.store.eventlog.log import EventLog

    vocabulary = embedder.words()
    log = EventLog(cfg.database)
    try:
        for room in rooms:
            share, told = not_english_share(
                log.texts.recent_bodies(RoomID(room), RECENT), vocabulary
            )
            if told >= MIN_TOLD and share > MOSTLY:
                yield (
                    f"language {room}",
                    f"{share:.0%} of its latest {told} messages do not read as English, "
                    f"and {cfg.index.embedder.model} reads English only: questions in the "
                    'room\'s language often get "nothing matches"',
                    COSTS,
                )
    finally:
        log.close()
