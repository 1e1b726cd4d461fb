"""The one normaliser: what the bot emitted and what someone pasted back must reduce to
the same words, whatever Markdown, HTML, table syntax or reply fallback dressed them in.
If these drift apart, overlap collapses and the derived filter silently stops firing."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matrix_sources.indexer.derived.normalise import (
    _markup_to_text,
    containment,
    normalise,
    sha256_normalised,
    shingles,
    strip_reply_fallback,
    text_shingles,
    words,
)
from matrix_sources.indexer.ingest.events import parse_event

EMITTED_MD = """## Signing keys

1. Generate a new key: `generate_signing_key -o /etc/matrix-synapse/new.signing.key`
2. Move the **old key** into `old_signing_keys` in _homeserver.yaml_,
   see [the docs](https://element-hq.github.io/synapse/latest/usage/configuration).
3. Restart Synapse.

```bash
sudo systemctl restart matrix-synapse
```
"""
# The same text as it reaches us from people: copied from a rendered page (no markup,
# numbers kept), as a client's HTML, and as a reply with the fallback quote on top.
PASTED_PLAIN = """Signing keys
1. Generate a new key: generate_signing_key -o /etc/matrix-synapse/new.signing.key
2. Move the old key into old_signing_keys in homeserver.yaml, see the docs.
3. Restart Synapse.
sudo systemctl restart matrix-synapse"""
PASTED_HTML = """<h2>Signing keys</h2><ol><li>Generate a new key: <code>generate_signing_key -o
/etc/matrix-synapse/new.signing.key</code></li><li>Move the <strong>old key</strong> into
<code>old_signing_keys</code> in <em>homeserver.yaml</em>, see
<a href="https://element-hq.github.io/synapse/latest/usage/configuration">the docs</a>.</li>
<li>Restart Synapse.</li></ol><pre><code class="language-bash">sudo systemctl restart
matrix-synapse</code></pre>"""
PASTED_REPLY = (
    "> <@alice:example.org> how do I rotate it?\n> (asking for a friend)\n\n" + PASTED_PLAIN
)
PASTED_MX_REPLY = (
    '<mx-reply><blockquote><a href="https://matrix.to/#/!r/$e">In reply to'
    '</a> <a href="https://matrix.to/#/@alice:example.org">@alice</a><br>'
    "how do I rotate it?</blockquote></mx-reply>" + PASTED_HTML
)


@pytest.mark.parametrize(
    "pasted",
    [PASTED_PLAIN, PASTED_HTML, PASTED_REPLY, PASTED_MX_REPLY],
    ids=["plain", "html", "reply-fallback", "mx-reply"],
)
def test_emit_and_ingest_normalise_the_same(pasted):
    assert normalise(pasted) == normalise(EMITTED_MD)
    assert text_shingles(pasted, 5) == text_shingles(EMITTED_MD, 5)
    assert sha256_normalised(pasted) == sha256_normalised(EMITTED_MD)


TABLE_MD = """| Task | Command |
| --- | :---: |
| Running queries | `SELECT pid, state FROM pg_stat_activity;` |
| Backup | `pg_dump -Fc synapse > synapse.dump` |"""
TABLE_HTML = """<table><thead><tr><th>Task</th><th>Command</th></tr></thead><tbody>
<tr><td>Running queries</td><td><code>SELECT pid, state FROM pg_stat_activity;</code></td></tr>
<tr><td>Backup</td><td><code>pg_dump -Fc synapse &gt; synapse.dump</code></td></tr>
</tbody></table>"""
TABLE_COPIED = """Task\tCommand
Running queries\tSELECT pid, state FROM pg_stat_activity;
Backup\tpg_dump -Fc synapse > synapse.dump"""


@pytest.mark.parametrize("variant", [TABLE_HTML, TABLE_COPIED], ids=["html", "copied"])
def test_tables_reduce_to_their_cells(variant):
    assert normalise(variant) == normalise(TABLE_MD)
    assert "---" not in normalise(TABLE_MD) and "|" not in normalise(TABLE_MD)


def test_case_whitespace_unicode_and_emphasis():
    assert normalise("  Restart\tSYNAPSE\n\n now  ") == "restart synapse now"
    assert normalise("ﬁle ＦＵＬＬ") == "file full"  # NFKC: ligature, full width
    assert normalise("__bold__ and *it* and ~~gone~~") == normalise("bold and it and gone")
    assert words("old_signing_keys") == ["old", "signing", "keys"]


def test_placeholders_and_shell_survive_but_urls_do_not():
    assert normalise("kubectl logs <pod> -n <namespace>") == "kubectl logs pod n namespace"
    assert normalise("see https://example.org/a?b=c and <https://x.org>") == "see and"
    assert normalise("try <script>alert(1)</script>") == normalise(
        "try &lt;script&gt;alert(1)&lt;/script&gt;"
    )


def test_a_markdown_quote_is_kept_a_reply_fallback_is_not():
    quote = "> sudo journalctl --vacuum-size=500M\n> sudo journalctl --vacuum-time=14d"
    assert normalise(quote) == "sudo journalctl vacuum size 500m sudo journalctl vacuum time 14d"
    fallback = "> <@sourcesbot:example.org> Sources for: disk\n> 1. ops · alice\n\nthanks!"
    assert strip_reply_fallback(fallback) == "thanks!"
    assert normalise(fallback) == "thanks"


def test_ingest_path_gives_the_same_words_as_the_normaliser():
    """parse_event strips the fallback of a real reply; normalising its body or the raw
    body gives the same words, so the two paths cannot disagree on replies."""
    raw = {
        "type": "m.room.message",
        "room_id": "!r:x",
        "sender": "@b:x",
        "event_id": "$e",
        "origin_server_ts": 1,
        "content": {
            "msgtype": "m.text",
            "body": PASTED_REPLY,
            "m.relates_to": {"m.in_reply_to": {"event_id": "$q"}},
        },
    }
    assert normalise(parse_event(raw).message.body) == normalise(PASTED_REPLY)


def test_shingles():
    ws = "a b c d e f".split()
    assert len(shingles(ws, 5)) == 2
    assert len(shingles(ws[:3], 5)) == 1  # shorter than a shingle: itself
    assert shingles([], 5) == frozenset()
    assert shingles(ws, 5) == shingles(ws + ws[:0], 5)
    assert containment(shingles(ws, 3), shingles(ws + ["g"], 3)) == 1.0
    assert containment(shingles(ws + ["g"], 3), shingles(ws, 3)) == 4 / 5


# -- disguises: what a reader and the model take for the same text (issue 26) -------------

CYRILLIC = str.maketrans("aceopxyABCEHKMOPTX", "асеорхуАВСЕНКМОРТХ")


def _inside_words(mark: str):
    return lambda t: re.sub(r"(\w\w)(?=\w\w)", lambda m: m.group(1) + mark, t)


DISGUISES = {
    "zero-width inside words": _inside_words("\u200b"),
    "zero-width after every character": lambda t: "".join(c + "\u200b" for c in t),
    "soft hyphens": _inside_words("\u00ad"),
    "cyrillic lookalikes": lambda t: t.translate(CYRILLIC),
    "bidi isolates and marks": lambda t: re.sub(r"(\w+)", "\u2066\\1\u2069\u200e", t),
    "variation selectors": _inside_words("\ufe0f"),
    "word joiner and zero-width joiners": _inside_words("\u2060\u200d"),
    "combining marks": _inside_words("\u0301"),
    "controls": _inside_words("\x01"),
    "html entities of invisibles": lambda t: _inside_words("&#8203;")(
        t.replace("<", "&lt;").replace(">", "&gt;")
    ),
}


@pytest.mark.parametrize("disguise", list(DISGUISES.values()), ids=list(DISGUISES))
def test_a_disguised_paste_reduces_to_the_words_emitted(disguise):
    pasted = disguise(PASTED_PLAIN)
    assert pasted != PASTED_PLAIN
    assert normalise(pasted) == normalise(EMITTED_MD)
    assert text_shingles(pasted, 5) == text_shingles(EMITTED_MD, 5)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    from matrix_sources.indexer.models.onnx_embedder import model_dir

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_padding()
    return tok


@pytest.mark.parametrize(
    "name",
    [
        "zero-width inside words",
        "zero-width after every character",
        "soft hyphens",
        "variation selectors",
        "combining marks",
        "word joiner and zero-width joiners",
        "controls",
    ],
)
def test_the_invisible_disguises_are_invisible_to_the_model_too(tokenizer, name):
    """Why they matter: the model reads these pastes as the very words of the original,
    so their vectors are the original's (cosine 1.000)."""
    pasted = DISGUISES[name](PASTED_PLAIN)
    assert tokenizer.encode(pasted).ids == tokenizer.encode(PASTED_PLAIN).ids


def test_every_character_the_model_ignores_inside_a_word_the_filter_ignores(tokenizer):
    """The filter sees what the model sees: over the whole BMP, each character that leaves
    `re?start` the model's `restart` leaves it the filter's `restart` too."""
    chars = [chr(c) for c in range(0x80, 0x10000) if not 0xD800 <= c < 0xE000]
    want = tokenizer.encode("restart").ids
    found = tokenizer.encode_batch([f"re{c}start" for c in chars])
    ignored = [c for c, e in zip(chars, found) if e.ids == want]
    assert len(ignored) > 7000  # format, controls, private use, marks, unassigned...
    missed = {f"U+{ord(c):04X}" for c in ignored if normalise(f"re{c}start") != "restart"}
    # A spacing mark to Python 3.11's Unicode, a nonspacing one to the tokenizer's newer.
    assert missed <= {"U+1734"}


def test_lookalikes_fold_in_either_case_and_genuine_words_stay_apart():
    """Upper case lookalikes are their Latin capitals, lower case ones their small
    letters. (TR39 is case sensitive: Cyrillic `М` is an `m`, `м` a turned `w`, so a
    non-Latin quote re-cased whole may no longer match; Latin text folds case as ever.)"""
    assert normalise("RЕSTАRТ Тhe Іnstall ΝEW") == "restart the install new"
    assert normalise("rеstаrt sеrνеr") == "restart server"  # Greek nu is a v
    assert normalise("ПРИВЕТ") == normalise("привет")  # т a small capital T: a case of t
    assert normalise("привет мир") != normalise("пока мир")
    assert normalise("restart") != normalise("restore")


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_plain_ascii_reduces_as_it_always_did(text):
    """The manifest keeps the shingles of every answer already sent: plain ASCII text,
    most of what it holds, must keep its words (TR39's ASCII folds, `rn` -> `m`, are not
    applied: the model tells those words apart too)."""
    before = re.findall(
        r"[^\W_]+",
        unicodedata.normalize("NFKC", _markup_to_text(strip_reply_fallback(text))).casefold(),
    )
    assert words(text) == before


@given(st.text())
def test_normalising_twice_changes_nothing(text):
    once = normalise(text)
    assert normalise(once) == once
