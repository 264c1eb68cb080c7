"""The keyspace and encodings (pure, no server)."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamsaver import InvalidInputError
from streamsaver.core.codec import parse_version, version_key
from streamsaver.core.feeds import SLOT_KINDS, slot_key
from streamsaver.core.keys import (
    escape_glob,
    key_pattern,
    log_pattern,
    lp,
    scratch_keys,
    thread_id_of,
    thread_keys,
    validate_prefix,
)
from streamsaver.core.slots import slot_of, slot_tag
from tests.strategies import hostile_text


def _slot_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes (its hash-tag rules)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


@given(hostile_text, hostile_text)
def test_distinct_threads_never_share_a_key_and_each_thread_has_one_slot(a: str, b: str) -> None:
    ka, kb = thread_keys("p", a), thread_keys("p", b)
    assert len({_slot_tag(k) for k in ka}) == 1
    assert thread_id_of("p", ka.log) == a
    if a != b:
        assert not set(ka) & set(kb)
        assert _slot_tag(ka.log) != _slot_tag(kb.log)


@given(hostile_text)
def test_every_thread_log_matches_the_scan_pattern_of_its_prefix_only(thread_id: str) -> None:
    key = thread_keys("pre*fix", thread_id).log
    # Redis globs treat a backslash as an escape, as fnmatch cannot; emulate on the prefix only
    pattern = log_pattern("pre*fix")
    assert pattern.startswith("pre\\*fix:")
    assert fnmatch.fnmatchcase(key, "pre[*]fix:{*}:log")
    assert not fnmatch.fnmatchcase(thread_keys("prexfix", thread_id).log, "pre[*]fix:{*}:log")


@given(st.lists(st.tuples(hostile_text, hostile_text), min_size=2, max_size=2, unique=True))
def test_length_prefixed_pairs_never_collide(pairs: list[tuple[str, str]]) -> None:
    (a1, b1), (a2, b2) = pairs
    assert lp(a1) + b1 != lp(a2) + b2 or (a1, b1) == (a2, b2)


@pytest.mark.parametrize("version", [1, 0, 12345678901234567890, 1.5, "0000000001.abc", ""])
def test_versions_round_trip_with_their_type(version: object) -> None:
    back = parse_version(version_key(version))
    assert back == version and type(back) is type(version)


def test_int_and_str_versions_stay_distinct() -> None:
    assert version_key(1) != version_key("1") != version_key(1.0)


@pytest.mark.parametrize("bad", [True, None, b"1", [1]])
def test_unusable_versions_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="version"):
        version_key(bad)


@pytest.mark.parametrize("bad", ["", "a{b", "a}b", "x\ny", 3, None])
def test_unusable_prefixes_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="prefix"):
        validate_prefix(bad)


@given(prefix=hostile_text, other=hostile_text, thread_id=hostile_text)
def test_every_key_of_a_prefix_is_under_its_pattern_and_no_others(
    prefix: str, other: str, thread_id: str
) -> None:
    """Every key starts with '<prefix>:{', and never with another prefix's '<other>:{' (the
    server's own matching of the patterns: tests/test_acl.py, ACL DRYRUN)."""
    for p in (prefix, other):
        if not p or any(c in p for c in "{}\r\n"):
            return
    keys = list(thread_keys(prefix, thread_id))
    slot = slot_of(keys[0])
    keys += [slot_key(prefix, slot, kind) for kind in SLOT_KINDS]
    for key in keys:
        assert key.startswith(prefix + ":{")
        assert key.startswith(other + ":{") == (other == prefix)
    assert key_pattern(prefix) == escape_glob(prefix) + ":{*"


def test_per_slot_keys_never_collide_with_a_threads_keys() -> None:
    for slot in (0, 1, 8000, 16383):
        # the thread whose tag is the slot tag lives in the same slot, under the same tag
        keys = thread_keys("p", slot_tag(slot))
        theirs = {*keys, *scratch_keys(keys)}
        assert not theirs & {slot_key("p", slot, kind) for kind in SLOT_KINDS}
        assert all(slot_of(slot_key("p", slot, kind)) == slot for kind in SLOT_KINDS)
