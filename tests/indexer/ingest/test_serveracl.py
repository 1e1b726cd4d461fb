"""The server ACL matcher (issue 46): the spec's order, globs, ports, IP literals, and
malformed content read as Synapse reads it; checked against Synapse's own evaluator over
generated ACLs and server names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matrix_sources.indexer.ingest.serveracl import glob_matches, host_of, parse_acl
from tests.strength import examples


def acl(allow=("*",), deny=(), **more):
    return parse_acl({"allow": list(allow), "deny": list(deny), **more})


def test_a_name_that_merely_ends_the_same_is_untouched():
    a = acl(deny=["evil.example"])
    assert not a.allows("evil.example")
    assert a.allows("notevil.example")
    assert a.allows("evil.example.org")
    assert a.allows_user("@friend:notevil.example")
    assert not a.allows_user("@spam:evil.example")


def test_globs_star_and_question_mark():
    a = acl(deny=["*.evil.example", "b?d.org"])
    assert not a.allows("a.evil.example") and not a.allows("x.y.evil.example")
    assert a.allows("evil.example")  # `*.` needs the dot
    assert not a.allows("bad.org") and not a.allows("bod.org")
    assert a.allows("bd.org") and a.allows("baad.org")  # `?` is exactly one
    assert not acl(deny=["*evil.example"]).allows("notevil.example")  # as written: any prefix


def test_ports_are_not_considered():
    a = acl(deny=["evil.example"])
    for name in ("evil.example", "evil.example:8448", "evil.example:1234"):
        assert not a.allows(name)
        assert not a.allows_user(f"@spam:{name}")
    assert host_of("[::1]:8448") == "[::1]" and host_of("[::1]") == "[::1]"
    # A pattern with a port matches nothing (Synapse too): named as a problem.
    with_port = acl(deny=["evil.example:8448"])
    assert with_port.allows("evil.example:8448")
    assert any("deny[0] names a port" in p for p in with_port.problems)


def test_allow_then_deny_order_and_the_default_deny():
    assert not acl(allow=["*"], deny=["*"]).allows("good.org")  # deny first
    only = acl(allow=["good.org", "*.good.org"])
    assert only.allows("good.org") and only.allows("chat.good.org")
    assert not only.allows("other.org")
    empty = parse_acl({})  # the spec: no allow denies every server
    assert not empty.allows("good.org")
    assert any("allow is empty" in p for p in empty.problems)


def test_ip_literals():
    assert acl().allows("1.2.3.4") and acl().allows("[::1]:8448")
    strict = acl(allow_ip_literals=False)
    assert not strict.allows("1.2.3.4") and not strict.allows("1.2.3.4:8448")
    assert not strict.allows("[2001:db8::1]")
    assert strict.allows("1.2.3.4.example") and strict.allows("good.org")


def test_case_is_ignored():
    a = acl(deny=["Evil.Example"])
    assert not a.allows("evil.example") and not a.allows("EVIL.EXAMPLE")


def test_malformed_content_reads_as_synapse_reads_it():
    a = parse_acl({"allow": ["*"], "deny": ["evil.example", 42, None], "allow_ip_literals": "no"})
    assert not a.allows("evil.example") and a.allows("1.2.3.4")
    assert "deny[1] is not a string: ignored, as Synapse does" in a.problems
    assert any("allow_ip_literals" in p for p in a.problems)
    b = parse_acl({"allow": "*", "deny": "evil.example"})  # not lists: empty
    assert not b.allows("good.org")
    assert any(p.startswith("allow is not a list") for p in b.problems)
    assert any("no server name" in p for p in acl(deny=["evil example"]).problems)
    assert not parse_acl("not an object").allows("good.org")
    many = acl(deny=[1] * 50)
    assert len(many.problems) == 6 and many.problems[-1] == "and 45 more"


def test_a_hostile_glob_costs_no_more_than_its_length():
    glob = "*a" * 100 + "*b"
    assert not glob_matches(glob, "a" * 255)  # backtracking regexes take ages here
    assert glob_matches(glob, "a" * 200 + "b")
    # A 64 KiB ACL of the globs a backtracking matcher finds hardest, judged whole.
    hostile = acl(deny=["*" + "a" * 250 + "b"] * 260 + ["?" * 254 + "*c"] * 20)
    assert hostile.allows("a" * 255) and not hostile.allows("a" * 254 + "b")


def test_thousands_of_globs_are_judged_once_per_server():
    a = acl(deny=[f"spam{i}.example" for i in range(5000)])
    assert not a.allows("spam4999.example")
    assert a.allows("good.org")
    assert a._verdicts == {"spam4999.example": False, "good.org": True}


HOST = st.text(alphabet="abcdeE.-0123456789[]:", min_size=1, max_size=12)
GLOB = st.text(alphabet="abeE.*?-1[]", min_size=0, max_size=8)


@settings(max_examples=examples(400), deadline=None, database=None)
@given(
    allow=st.lists(GLOB, max_size=3),
    deny=st.lists(GLOB, max_size=3),
    literals=st.booleans(),
    host=HOST,
)
def test_agrees_with_synapses_evaluator(allow, deny, literals, host):
    synapse = pytest.importorskip("synapse.synapse_rust.acl")
    expected = synapse.ServerAclEvaluator(literals, allow, deny).server_matches_acl_event(
        host_of(host)  # Synapse cuts the port before it asks
    )
    assert (
        parse_acl({"allow": allow, "deny": deny, "allow_ip_literals": literals}).allows(host)
        == expected
    )


@settings(max_examples=examples(300), deadline=None, database=None)
@given(text=st.text(alphabet="ab.", max_size=10), glob=st.text(alphabet="ab.*?", max_size=6))
def test_glob_agrees_with_a_plain_recursive_definition(text, glob):
    def ref(g: str, t: str) -> bool:
        if not g:
            return not t
        if g[0] == "*":
            return ref(g[1:], t) or (bool(t) and ref(g, t[1:]))
        return bool(t) and (g[0] in ("?", t[0])) and ref(g[1:], t[1:])

    assert glob_matches(glob, text) == ref(glob, text)
