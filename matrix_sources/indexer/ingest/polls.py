"""Polls (MSC3381, in the spec since v1.7): a poll's question and answers are a message of
its sender, cited by the poll's own event id; votes and results are never stored.

    m.poll.start                    content `m.poll`: question and answers hold `m.text`,
                                    a list of {body, mimetype} blocks (text/plain chosen)
    org.matrix.msc3381.poll.start   content `org.matrix.msc3381.poll.start`: texts under
                                    `org.matrix.msc1767.text`, a string (what Element sends)
                                    or a list of blocks
    either, with m.relates_to m.replace and the new poll in `m.new_content`
                                    -> an edit of the poll, as for a message
    m.poll.response, m.poll.end and their unstable names
                                    -> skipped: a vote or a result says who chose what

The indexed text reads as clients' own fallback does: the question, then one numbered
line per answer. MSC3381 truncates a poll's answers to 20, and clients show no more; so
does the index (MAX_ANSWERS): a poll with more is indexed with its first 20, and the rest
counted in the journal (`poll_answers_bounded`). A poll with no question, no
answers or a malformed shape is skipped, journalled by id and rule (`poll_malformed`),
never text.
"""

from __future__ import annotations

from typing import Any

START_TYPES = {
    "m.poll.start": ("m.poll", "m.text"),
    "org.matrix.msc3381.poll.start": ("org.matrix.msc3381.poll.start", "org.matrix.msc1767.text"),
}
VOTE_TYPES = frozenset(
    {
        "m.poll.response",
        "m.poll.end",
        "org.matrix.msc3381.poll.response",
        "org.matrix.msc3381.poll.end",
    }
)
MAX_ANSWERS = 20  # MSC3381: "The array is truncated to 20 maximum options."
POLL_MALFORMED = "poll_malformed"
POLL_ANSWERS_BOUNDED = "poll_answers_bounded"


def _text(holder: Any, text_key: str) -> str | None:
    """The plain text of a question or an answer: a string, or the first text/plain
    block (a block without a mimetype is plain) of a list of {body, mimetype}."""
    if not isinstance(holder, dict):
        return None
    value = holder.get(text_key)
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        for block in value:
            if (
                isinstance(block, dict)
                and isinstance(block.get("body"), str)
                and block.get("mimetype", "text/plain") == "text/plain"
            ):
                return block["body"].strip() or None
    return None


def poll_text(etype: str, content: dict) -> tuple[str | None, str, int]:
    """(the poll's text, or None; a skip reason if None, else ""; how many answers past
    MAX_ANSWERS were left out)."""
    poll_key, text_key = START_TYPES[etype]
    poll = content.get(poll_key)
    if not isinstance(poll, dict):
        return None, POLL_MALFORMED, 0
    question = _text(poll.get("question"), text_key)
    answers = poll.get("answers")
    if question is None or not isinstance(answers, list) or not answers:
        return None, POLL_MALFORMED, 0
    texts = [t for t in (_text(a, text_key) for a in answers[:MAX_ANSWERS]) if t is not None]
    if not texts:
        return None, POLL_MALFORMED, 0
    lines = [question] + [f"{i}. {t}" for i, t in enumerate(texts, start=1)]
    return "\n".join(lines), "", max(0, len(answers) - MAX_ANSWERS)
