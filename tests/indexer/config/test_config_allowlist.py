"""Configuration errors an admin can act on, the allowlist edited round-trip, and the
data dir `matrix-sources init` writes (fresh tokens, an exclusive namespace for the bot)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from matrix_sources.indexer.config import ConfigError, load_config
from matrix_sources.indexer.datadir import (
    InitError,
    Registration,
    api_token,
    init_data_dir,
    load_registration,
    registration_yaml,
)
from matrix_sources.indexer.ingest import allowlist as allowlist_mod
from matrix_sources.indexer.ingest.allowlist import add_room, load_allowlist, remove_room
from tests.paths import ROOT as REPO

EXAMPLE = REPO / "matrix_sources" / "config" / "config.example.yaml"


def write_config(tmp_path: Path, edit=None, text: str | None = None) -> Path:
    """The example config with the homeserver filled in, then `edit(data)` applied."""
    path = tmp_path / "config.yaml"
    if text is not None:
        path.write_text(text)
        return path
    y = YAML()
    data = y.load(EXAMPLE.read_text())
    data["homeserver"]["url"] = "https://matrix.community.org"
    data["homeserver"]["domain"] = "community.org"
    if edit:
        edit(data)
    with open(path, "w") as f:
        y.dump(data, f)
    return path


def config_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    e = info.value
    assert str(path.resolve()) in str(e)  # every error names the file
    return e


def test_example_config_with_a_homeserver_loads(tmp_path):
    cfg = load_config(write_config(tmp_path))
    assert cfg.homeserver.url == "https://matrix.community.org"
    assert cfg.bot_user == "@sourcesbot:community.org"
    assert cfg.index.chunk_policy.max_bytes == 500 and cfg.index.chunk_policy.gap_ms == 1_800_000
    assert cfg.allowlist_path == tmp_path.resolve() / "allowlist.yaml"
    assert cfg.chroma.path == tmp_path.resolve() / "chroma"
    assert cfg.puppet_patterns == ("^@_?discord_[^:]*:.*$",)


def test_missing_homeserver_url(tmp_path):
    e = config_error(write_config(tmp_path, lambda d: d["homeserver"].pop("url")))
    assert e.key == "homeserver.url" and "homeserver.url: is missing" in str(e)


def test_missing_homeserver_section(tmp_path):
    e = config_error(write_config(tmp_path, lambda d: d.pop("homeserver")))
    assert e.key == "homeserver.url"


def set_key(key: str, value):
    """An edit for write_config: `index.chroma.port` set to value."""

    def edit(d):
        node = d
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value

    return edit


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("homeserver.url", 8008, "must be a string, not 8008"),
        ("homeserver.url", "matrix.community.org", "http(s) URL"),
        ("index.window_max_bytes", "big", "must be an integer, not 'big'"),
        ("index.window_max_bytes", "500", "must be an integer"),
        ("index.window_max_bytes", True, "must be an integer, not True"),
        ("index.window_max_bytes", 0, "greater than 0"),
        ("index.window_gap_seconds", -5, "greater than 0"),
        ("index.debounce_seconds", -1, "at least 0, not -1"),
        ("index.debounce_seconds", "soon", "must be a number"),
        ("index.compaction_interval_seconds", 0, "greater than 0"),
        ("index.backfill_days", -30, "greater than 0"),
        ("index.chroma.port", 0, "from 1 to 65535"),
        ("appservice.port", 70000, "from 1 to 65535, not 70000"),
        ("search.default_top_k", 50, "from 1 to 20"),
        ("search.default_top_k", 0, "from 1 to 20"),
        ("search.rrf_k", [60], "must be an integer"),
        ("search.rrf_k", 0, "greater than 0"),
        ("search.lexical_max_terms", -1, "at least 0"),
        ("search.rate_limit_per_minute", -1, "at least 0"),
        ("appservice.port", "http", "must be an integer"),
        ("index.chroma.mode", "cloud", "embedded or server, not 'cloud'"),
        ("gate.puppet_patterns", "^@discord_", "must be a list"),
        ("logging.level", "LOUD", "DEBUG, INFO, WARNING or ERROR"),
        ("logging.format", "xml", "text or json"),
        ("appservice.bot_localpart", "Sources Bot", "not a valid localpart"),
        ("index", 5, "must be a mapping"),
        # The settings added for answers (issue 13) and backends (issue 16).
        ("search.min_similarity", 1.5, "from -1 to 1, not 1.5"),
        ("search.min_similarity", -1.01, "from -1 to 1"),
        ("search.min_similarity", "high", "must be a number"),
        ("index.answer_horizon_hours", 0, "greater than 0"),
        ("index.answer_horizon_hours", -24, "greater than 0"),
        ("index.answer_horizon_messages", 0, "at least 1, not 0"),
        ("index.answer_horizon_messages", 1.5, "must be an integer"),
        ("index.embedder.backend", "cuda", "torch, torch-bf16, onnx, onnx-int8 or q4, not 'cuda'"),
        ("index.embedder.model", "", "must not be empty"),
    ],
)
def test_bad_values_name_the_key(tmp_path, key, value, words):
    e = config_error(write_config(tmp_path, set_key(key, value)))
    assert e.key == key
    assert f": {key}: " in str(e) and words in str(e)


def test_a_negative_debounce_is_refused(tmp_path):
    e = config_error(write_config(tmp_path, set_key("index.debounce_seconds", -0.5)))
    assert str(e) == (
        f"{tmp_path.resolve() / 'config.yaml'}: index.debounce_seconds: "
        "must be at least 0, not -0.5"
    )
    assert (
        load_config(
            write_config(tmp_path, set_key("index.debounce_seconds", 0))
        ).index.debounce_seconds
        == 0
    )


@pytest.mark.parametrize(
    "key,near",
    [
        ("index.window_max_byte", "window_max_bytes"),
        ("serach", "search"),
        ("index.chroma.prot", "port"),
        ("index.embedder.bakend", "backend"),
        ("search.min_similarty", "min_similarity"),
        ("derived.answer_treshold", "answer_threshold"),
        ("homeserver.server_name", None),
    ],
)
def test_an_unknown_key_is_refused_naming_it_and_the_file(tmp_path, key, near):
    """A misspelled key would otherwise start the service silently on the default."""

    def edit(d):
        *parents, last = key.split(".")
        node = d
        for p in parents:
            node = node[p]
        node[last] = 400

    e = config_error(write_config(tmp_path, edit))
    assert e.key == key
    assert str(e).startswith(f"{tmp_path.resolve() / 'config.yaml'}: {key}: unknown key")
    if near:
        assert f"did you mean {near}?" in str(e)


def test_every_problem_is_named_one_a_line(tmp_path):
    def edit(d):
        d["index"]["window_max_byte"] = 400
        d["search"]["min_similarity"] = 2

    e = config_error(write_config(tmp_path, edit))
    file = tmp_path.resolve() / "config.yaml"
    lines = str(e).splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        [str(file), "index.window_max_byte"],
        [str(file), "search.min_similarity"],
    ]


@pytest.mark.parametrize(
    "key,value",
    [
        ("search.min_similarity", -1),
        ("search.min_similarity", 1),
        ("search.min_similarity", 0),
        ("index.answer_horizon_hours", 0.5),
        ("index.answer_horizon_hours", 720),
        ("index.answer_horizon_messages", 1),
        ("index.embedder.backend", "onnx"),
        ("index.embedder.backend", "onnx-int8"),
        ("index.embedder.backend", "torch"),
    ],
)
def test_new_settings_accept_their_range(tmp_path, key, value):
    got = load_config(write_config(tmp_path, set_key(key, value)))
    for part in key.split("."):  # the key's own place: one definition of it
        got = getattr(got, part)
    assert got == value


def test_new_settings_default_when_absent(tmp_path):
    def edit(d):
        del d["search"]["min_similarity"]
        del d["index"]["answer_horizon_hours"]
        del d["index"]["answer_horizon_messages"]
        del d["index"]["embedder"]

    cfg = load_config(write_config(tmp_path, edit))
    assert (
        cfg.search.min_similarity,
        cfg.index.answer_horizon_hours,
        cfg.index.answer_horizon_messages,
        cfg.index.embedder.model,
        cfg.index.embedder.backend,
    ) == (0.34, 24, 150, "all-MiniLM-L6-v2", "onnx-int8")


def test_the_embedder_as_a_name_alone_still_reads(tmp_path):
    """Config files written before backends say `index.embedder: NAME`."""
    cfg = load_config(write_config(tmp_path, set_key("index.embedder", "hash")))
    assert (cfg.index.embedder.model, cfg.index.embedder.backend) == ("hash", "torch")
    cfg = load_config(
        write_config(tmp_path, set_key("index.embedder", {"model": "hash", "backend": "onnx"}))
    )
    assert (cfg.index.embedder.model, cfg.index.embedder.backend) == ("hash", "onnx")


def test_an_empty_value_reads_as_the_default(tmp_path):
    """`port:` with nothing after it, as when an admin blanks a value."""

    def edit(d):
        d["index"]["chroma"]["port"] = None
        d["search"]["admins"] = None
        d["derived"]["min_words"] = None

    cfg = load_config(write_config(tmp_path, edit))
    assert (cfg.chroma.port, cfg.search.admins, cfg.derived.min_words) == (8000, (), 8)


def test_the_example_shows_every_setting_at_its_default(tmp_path):
    """One default per setting: the template says the same value as the code, and
    documents every key (commented out where unset is the default)."""
    from matrix_sources.indexer.config import Config

    data = YAML(typ="safe").load(EXAMPLE.read_text())
    data["homeserver"] = {"url": "https://matrix.community.org", "domain": "community.org"}
    from_example = Config.model_validate(data)
    defaults = Config.model_validate({"homeserver": data["homeserver"]})
    assert from_example == defaults
    text = EXAMPLE.read_text()

    def leaves(section, prefix=""):
        fields = getattr(section, "model_fields", None) or section.__pydantic_fields__
        for name, info in fields.items():
            if isinstance(info.annotation, type) and (
                hasattr(info.annotation, "model_fields")
                or hasattr(info.annotation, "__pydantic_fields__")
            ):
                yield from leaves(info.annotation, f"{prefix}{name}.")
            else:
                yield prefix + name

    missing = [k for k in leaves(Config) if f"{k.rsplit('.', 1)[-1]}:" not in text]
    assert missing == []


def test_server_mode_defaults_the_host(tmp_path):
    cfg = load_config(write_config(tmp_path, set_key("index.chroma.mode", "server")))
    assert (cfg.chroma.mode, cfg.chroma.host, cfg.chroma.port) == ("server", "127.0.0.1", 8000)
    assert cfg.chroma.persist_dir is None


def test_a_servers_persist_dir_resolves_beside_the_config_and_is_for_server_mode(tmp_path):
    def server(data):
        data["index"]["chroma"].update(mode="server", persist_dir="chroma-server")

    cfg = load_config(write_config(tmp_path, server))
    assert cfg.chroma.persist_dir == tmp_path / "chroma-server"
    e = config_error(write_config(tmp_path, set_key("index.chroma.persist_dir", "/srv/x")))
    assert "index.chroma" in str(e) and "persist_dir is for mode: server" in str(e)


@pytest.mark.parametrize(
    "key,value",
    [
        ("homeserver.url", "https://example.com"),
        ("homeserver.url", "https://matrix.example.com:8448"),
        ("homeserver.domain", "example.com"),
        ("homeserver.domain", "matrix.example.com"),
        ("homeserver.domain", "CHANGE_ME"),
    ],
)
def test_placeholder_values_are_refused(tmp_path, key, value):
    section, name = key.split(".")
    e = config_error(write_config(tmp_path, lambda d: d[section].__setitem__(name, value)))
    assert e.key == key and "placeholder" in str(e)


@pytest.mark.parametrize(
    "url,domain",
    [
        ("https://matrix.myexample.community", "myexample.community"),
        ("https://chat.notexample.com", "notexample.com"),
    ],
)
def test_real_domains_that_contain_example_com_are_accepted(tmp_path, url, domain):
    def edit(d):
        d["homeserver"]["url"] = url
        d["homeserver"]["domain"] = domain

    assert load_config(write_config(tmp_path, edit)).homeserver.domain == domain


@pytest.mark.parametrize(
    "patterns,index,words",
    [
        (["(["], 0, "not a regex"),
        (["^@ok_.*", "*bad"], 1, "not a regex"),
        ([5], 0, "must be a string"),
    ],
)
def test_bad_puppet_regex_names_its_index(tmp_path, patterns, index, words):
    e = config_error(
        write_config(tmp_path, lambda d: d["gate"].__setitem__("puppet_patterns", patterns))
    )
    assert e.key == f"gate.puppet_patterns[{index}]" and words in str(e)


def test_not_yaml_and_not_a_mapping_and_no_file(tmp_path):
    assert "not valid YAML" in str(config_error(write_config(tmp_path, text="a: [1\n")))
    assert "mapping" in str(config_error(write_config(tmp_path, text="- a\n- b\n")))
    e = config_error(tmp_path / "nope.yaml")
    assert "matrix-sources init" in str(e)
    assert str(tmp_path.resolve() / "config.yaml") in str(config_error(tmp_path))  # -c DIR


# -- every command that reads the config refuses a misspelled key ----------------------


@pytest.fixture
def misspelled(tmp_path, capsys) -> Path:
    """A data dir from `init` whose config says window_max_byte (no s)."""
    from matrix_sources.appservice.cli.main import main

    d = tmp_path / "data"
    assert main(["init", "--data-dir", str(d), "--domain", "community.org"]) == 0
    cfg = d / "config.yaml"
    cfg.write_text(cfg.read_text().replace("window_max_bytes:", "window_max_byte:"))
    capsys.readouterr()
    return cfg


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],
        ["search", "ntfs"],
        ["journal"],
        ["doctor"],
        ["backfill"],
        ["allowlist", "list"],
        ["verify"],
    ],
)
def test_a_misspelled_key_stops_each_command_naming_key_and_file(misspelled, capsys, argv):
    from matrix_sources.appservice.cli.main import main

    assert main([*argv, "-c", str(misspelled)]) == 1
    out = capsys.readouterr()
    said = out.err + out.out
    assert f"{misspelled.resolve()}: index.window_max_byte: unknown key" in said
    assert "did you mean window_max_bytes?" in said and "Traceback" not in said
    assert not (misspelled.parent / "eventlog.sqlite3").exists()  # stopped before opening


def test_the_installed_command_exits_1_without_a_traceback(misspelled):
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "matrix_sources.appservice.cli.main", "run", "-c", str(misspelled)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 1
    assert p.stderr.strip() == (
        f"error: {misspelled.resolve()}: index.window_max_byte: "
        "unknown key; did you mean window_max_bytes? the keys here are "
        "answer_horizon_hours, answer_horizon_messages, backfill_days, "
        "chroma, claim_lease_seconds, compaction_interval_seconds, "
        "debounce_seconds, embedder, max_pending, pipeline, "
        "require_world_readable, space_depth, space_max_rooms, space_reread_seconds, "
        "window_gap_seconds, window_max_bytes"
    )


# -- allowlist --------------------------------------------------------------------------

ALLOWLIST = """\
# Rooms matrix-sources indexes.
# Keep this list short.
rooms:
  - '!first:example.org'  # #first:example.org
  # the operations room
  - '!second:example.org'  # #ops:example.org
  - '!third:example.org'
"""


@pytest.fixture
def allowlist(tmp_path) -> Path:
    p = tmp_path / "allowlist.yaml"
    p.write_text(ALLOWLIST)
    return p


def test_add_keeps_comments_and_order(allowlist):
    assert add_room(allowlist, "!fourth:example.org", "#fourth:example.org")
    text = allowlist.read_text()
    assert text.startswith(ALLOWLIST.rstrip("\n").rsplit("\n", 1)[0])  # all before untouched
    for comment in (
        "# Rooms matrix-sources indexes.",
        "# Keep this list short.",
        "# #first:example.org",
        "# the operations room",
        "# #ops:example.org",
        "# #fourth:example.org",
    ):
        assert comment in text
    assert load_allowlist(allowlist) == [
        "!first:example.org",
        "!second:example.org",
        "!third:example.org",
        "!fourth:example.org",
    ]


def test_add_twice_is_a_no_op(allowlist):
    assert not add_room(allowlist, "!second:example.org")
    assert allowlist.read_text() == ALLOWLIST


def test_remove_keeps_the_other_rooms_and_their_comments(allowlist):
    assert remove_room(allowlist, "!third:example.org")
    text = allowlist.read_text()
    assert load_allowlist(allowlist) == ["!first:example.org", "!second:example.org"]
    for comment in (
        "# Rooms matrix-sources indexes.",
        "# #first:example.org",
        "# the operations room",
        "# #ops:example.org",
    ):
        assert comment in text
    assert not remove_room(allowlist, "!third:example.org")


def test_remove_middle_room_keeps_its_neighbours_comments(allowlist):
    assert remove_room(allowlist, "!first:example.org")
    text = allowlist.read_text()
    assert "# #first:example.org" not in text  # its own comment goes with it
    assert "# the operations room" in text and "# #ops:example.org" in text
    assert load_allowlist(allowlist) == ["!second:example.org", "!third:example.org"]


RICH = """\
# header
rooms:
  # infrastructure
  - '!a:x'  # #a:x
  # community
  - '!b:x'  # #b:x
  # support
  - '!c:x'
# footer
"""


@pytest.mark.parametrize("room", ["!a:x", "!b:x", "!c:x"])
def test_remove_any_room_keeps_every_full_line_comment_in_order(tmp_path, room):
    p = tmp_path / "allowlist.yaml"
    p.write_text(RICH)
    assert remove_room(p, room)
    text = p.read_text()
    comments = [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith("#") and not line.strip().startswith("# #")
    ]
    assert comments == ["# header", "# infrastructure", "# community", "# support", "# footer"]
    assert f"# #{room[1:]}" not in text  # the room's own end-of-line comment goes with it
    assert load_allowlist(p) == [r for r in ["!a:x", "!b:x", "!c:x"] if r != room]
    # The line of the removed room is the only line gone.
    assert [line for line in RICH.splitlines() if line not in text.splitlines()] == [
        line for line in RICH.splitlines() if f"'{room}'" in line
    ]


def test_add_then_remove_round_trips(allowlist):
    add_room(allowlist, "!new:example.org", "#new:example.org")
    remove_room(allowlist, "!new:example.org")
    assert allowlist.read_text() == ALLOWLIST


def test_add_to_the_example_allowlist(tmp_path):
    p = tmp_path / "allowlist.yaml"
    shutil.copy(REPO / "matrix_sources" / "config" / "allowlist.example.yaml", p)
    header = [line for line in p.read_text().splitlines() if line.startswith("#")]
    add_room(p, "!abc:example.org", "#abc:example.org")
    add_room(p, "!v12roomidwithoutserver")
    text = p.read_text()
    assert all(line in text for line in header)
    assert load_allowlist(p) == ["!abc:example.org", "!v12roomidwithoutserver"]
    assert "[" not in text.split("rooms:", 1)[1]  # block style, one room a line


def test_add_to_a_missing_file(tmp_path):
    p = tmp_path / "allowlist.yaml"
    assert add_room(p, "!abc:example.org")
    assert load_allowlist(p) == ["!abc:example.org"]


@pytest.mark.parametrize("bad", ["#alias:example.org", "abc", "!with space:x", ""])
def test_add_refuses_what_is_not_a_room_id(allowlist, bad):
    with pytest.raises(ConfigError) as info:
        add_room(allowlist, bad)
    assert "not a room id" in str(info.value) and str(allowlist) in str(info.value)
    assert allowlist.read_text() == ALLOWLIST


def test_writes_are_atomic(allowlist, monkeypatch):
    """A reader (the running service) sees the old file or the new one, never half."""
    before_inode = allowlist.stat().st_ino
    reader = open(allowlist)
    add_room(allowlist, "!fourth:example.org")
    assert allowlist.stat().st_ino != before_inode  # replaced by rename, not rewritten
    assert reader.read() == ALLOWLIST
    reader.close()

    written = allowlist.read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(allowlist_mod.os, "replace", crash)
    with pytest.raises(OSError):
        add_room(allowlist, "!fifth:example.org")
    assert allowlist.read_text() == written
    assert sorted(p.name for p in allowlist.parent.iterdir()) == ["allowlist.yaml"]


def test_write_keeps_the_file_mode(allowlist):
    os.chmod(allowlist, 0o644)
    add_room(allowlist, "!fourth:example.org")
    assert stat.S_IMODE(allowlist.stat().st_mode) == 0o644


def test_bad_allowlist_entries_name_their_index(tmp_path):
    p = tmp_path / "allowlist.yaml"
    p.write_text("rooms:\n  - '!ok:x'\n  - 42\n")
    with pytest.raises(ConfigError) as info:
        load_allowlist(p)
    assert info.value.key == "rooms[1]"


# -- init and the registration ----------------------------------------------------------


def read_yaml(p: Path):
    return YAML(typ="safe").load(p.read_text())


def test_init_writes_a_working_data_dir(tmp_path):
    d = tmp_path / "data"
    files = init_data_dir(d, "http://127.0.0.1:8008", "community.org", as_port=29999)
    assert sorted(f.name for f in files) == [
        "allowlist.yaml",
        "api_token",
        "config.yaml",
        "registration.yaml",
    ]
    cfg = load_config(d / "config.yaml")
    assert (cfg.homeserver.url, cfg.homeserver.domain, cfg.appservice.port) == (
        "http://127.0.0.1:8008",
        "community.org",
        29999,
    )
    reg = load_registration(cfg.registration_path)
    assert reg.url == "http://127.0.0.1:29999"
    assert reg.sender_localpart == cfg.appservice.bot_localpart
    assert load_allowlist(cfg.allowlist_path) == []
    assert stat.S_IMODE((d / "registration.yaml").stat().st_mode) == 0o600
    # The search API's read token: its own, readable by its owner only.
    assert stat.S_IMODE(cfg.api_token_path.stat().st_mode) == 0o600
    assert api_token(cfg) not in (reg.as_token, reg.hs_token) and len(api_token(cfg)) >= 32
    # The config keeps the example's comments, so the admin can read what each key does.
    assert "# Hits per answer" in (d / "config.yaml").read_text()


def test_init_refuses_to_overwrite_without_force(tmp_path):
    d = tmp_path / "data"
    init_data_dir(d)
    (d / "allowlist.yaml").write_text("rooms:\n  - '!mine:x'\n")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with pytest.raises(InitError) as info:
        init_data_dir(d)
    assert "--force" in str(info.value) and "registration.yaml" in str(info.value)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_init_refuses_if_only_one_file_exists(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "registration.yaml").write_text("id: mine\n")
    with pytest.raises(InitError):
        init_data_dir(d)
    assert (d / "registration.yaml").read_text() == "id: mine\n"


def test_init_writes_fresh_random_tokens_each_time(tmp_path):
    d = tmp_path / "data"
    init_data_dir(d)
    first = load_registration(d / "registration.yaml")
    init_data_dir(d, force=True)
    second = load_registration(d / "registration.yaml")
    other = tmp_path / "other"
    init_data_dir(other)
    third = load_registration(other / "registration.yaml")
    tokens = [
        first.as_token,
        first.hs_token,
        second.as_token,
        second.hs_token,
        third.as_token,
        third.hs_token,
    ]
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) >= 32 and "CHANGE_ME" not in t for t in tokens)


@pytest.mark.parametrize("domain", ["localhost", "community.org", "localhost:8448"])
def test_registration_namespace_is_exclusive_and_holds_only_the_bot(tmp_path, domain):
    d = tmp_path / "data"
    init_data_dir(d, domain=domain)
    reg = read_yaml(d / "registration.yaml")
    [ns] = reg["namespaces"]["users"]
    assert ns["exclusive"] is True
    assert reg["namespaces"]["aliases"] == [] and reg["namespaces"]["rooms"] == []
    assert_holds_only(ns["regex"], reg["sender_localpart"], domain)


def test_registration_regex_escapes_the_localpart():
    text = registration_yaml(
        Registration("matrix-sources", "http://127.0.0.1:1", "a" * 40, "b" * 40, "sources.bot"),
        "community.org",
    )
    [ns] = YAML(typ="safe").load(text)["namespaces"]["users"]
    assert_holds_only(ns["regex"], "sources.bot", "community.org")
    assert not re.match(ns["regex"], "@sourcesXbot:community.org")


def assert_holds_only(regex: str, localpart: str, domain: str) -> None:
    rx = re.compile(regex)
    # Synapse tests namespaces with re.match: anchored at the start only.
    assert rx.match(f"@{localpart}:{domain}")
    for other in [
        f"@{localpart}2:{domain}",
        f"@x{localpart}:{domain}",
        f"@alice:{domain}",
        f"@{localpart}:{domain}.evil.org",
        f"@{localpart}:{domain}x",
        f"@{localpart}:other.org",
    ]:
        assert not rx.match(other), other


def test_repository_registration_template_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_registration(REPO / "registration.yaml")
    msg = str(info.value)
    assert "placeholder" in msg and "matrix-sources init" in msg
    assert info.value.key in ("as_token", "hs_token")


@pytest.mark.parametrize("key", ["as_token", "hs_token"])
def test_short_or_placeholder_tokens_are_refused(tmp_path, key):
    d = tmp_path / "data"
    init_data_dir(d)
    p = d / "registration.yaml"
    reg = read_yaml(p)
    for bad in ["CHANGE_ME", "short", "x" * 20 + "CHANGE_ME"]:
        reg[key] = bad
        YAML().dump(reg, p)
        with pytest.raises(ConfigError) as info:
            load_registration(p)
        assert info.value.key == key and "matrix-sources init" in str(info.value)


def test_registration_missing_keys_are_named(tmp_path):
    p = tmp_path / "registration.yaml"
    p.write_text("id: x\nurl: http://127.0.0.1:1\nas_token: " + "a" * 40 + "\n")
    with pytest.raises(ConfigError) as info:
        load_registration(p)
    assert info.value.key == "hs_token"


def test_the_old_name_of_the_compaction_interval_says_its_new_one(tmp_path):
    def edit(d):
        d["index"]["scrub_interval_seconds"] = d["index"].pop("compaction_interval_seconds")

    e = config_error(write_config(tmp_path, edit))
    assert "index.scrub_interval_seconds" in str(e) and "index.compaction_interval_seconds" in str(
        e
    )
