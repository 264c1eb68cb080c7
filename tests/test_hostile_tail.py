"""Garbage in thread logs and feeds, fed to the tail decoder and the feed-pointer resolver
(fuzzed with Hypothesis): every entry comes out as an event or a reported skip, never an
exception, so no hand-written entry can crash a tailer (principle 11). Both are I/O-free; the
replies Redis would give are built from the same raw field dicts."""

from __future__ import annotations

from typing import Any

import ormsgpack
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from streamsaver.core.codec import Codec
from streamsaver.core.keys import thread_keys
from streamsaver.core.slots import slot_of
from streamsaver.events import SkippedEvent, ThreadEvent
from streamsaver.tailing.decode import decode_event
from streamsaver.tailing.feeds import FeedTail
from streamsaver.tailing.steps import Batch

CODEC = Codec(JsonPlusSerializer(), 1 << 20)
LOG_FIELDS = [b"k", b"sv", b"thread", b"ns", b"id", b"parent", b"run", b"meta", b"nv", b"task",
              b"path", b"wi", b"w0", b"w1", b"items", b"runs", b"copy_of", b"origin"]  # fmt: skip
POINTER_FIELDS = [b"t", b"e", b"k", b"ns", b"id"]

packed = st.builds(
    ormsgpack.packb,
    st.recursive(
        st.one_of(st.text(max_size=5), st.integers(-5, 5), st.none(), st.booleans()),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=8,
    ),
)
values = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"checkpoint", b"writes", b"delete", b"1", b"0", b"99", b"", b"\xff\xfe"]),
    packed,
    st.just(CODEC.dump(AIMessage(content="hi"))),
    st.just(ormsgpack.packb(["msg", 0])),
)
entry_ids = st.one_of(
    st.builds("{}-{}".format, st.integers(0, 2**48), st.integers(0, 9)),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(LOG_FIELDS), values, max_size=12), entry_ids)
def test_any_log_entry_decodes_to_an_event_or_a_reported_skip(
    fields: dict[bytes, bytes], entry_id: str
) -> None:
    if not entry_id[:1].isdigit():
        entry_id = "1-0"  # Redis only hands out ids of this form
    item = decode_event(CODEC, "log", entry_id, fields)
    assert isinstance(item, (ThreadEvent, SkippedEvent))
    if isinstance(item, SkippedEvent):
        assert item.reason and item.id == entry_id


pointers = st.dictionaries(
    st.sampled_from(POINTER_FIELDS),
    st.one_of(values, st.just(b"t1"), st.just(b"1-0"), st.just(b"1700000000000-1")),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(pointers, st.dictionaries(st.sampled_from(LOG_FIELDS), values)), max_size=5)
)
def test_any_feed_pointer_resolves_to_an_event_or_a_reported_skip(
    batch: list[tuple[dict[bytes, bytes], dict[bytes, bytes]]],
) -> None:
    tail = FeedTail("p", CODEC, after="0")
    slot = slot_of(thread_keys("p", "t1").log)
    flow = tail.resolve([(slot, f"9-{i}", pointer) for i, (pointer, _) in enumerate(batch)])
    logged = iter(entry for _, entry in batch)
    result: Any = None
    try:
        step = next(flow)
        assert isinstance(step, Batch)
        # each XRANGE the resolver asks for answers with the entry that pointer names
        replies = [[[call[2], [x for kv in next(logged).items() for x in kv]]]
                   for call in step.calls]  # fmt: skip
        flow.send(replies)
    except StopIteration as stop:
        result = stop.value
    assert result is not None and len(result) == len(batch)
    assert all(isinstance(item, (ThreadEvent, SkippedEvent)) for _, _, item in result)
