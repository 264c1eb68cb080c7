"""reuse_items=True against assignments made in place on items it holds: whatever is assigned on
an item itself (an attribute, a slot, a mapping's key, a list's element), the next put stores
the bytes a fresh encoding gives, and every reader reads what InMemorySaver reads. (A change
inside an attribute's own value is the documented limit of the option: README, "Reusing list
items".)"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from streamsaver import RedisStreamSaver
from streamsaver.core.codec import Codec


@dataclass(slots=True)
class Slotted:
    role: str
    content: str
    tags: list[str] = field(default_factory=list)


@dataclass
class Plain:
    role: str
    content: str


class Model(BaseModel):
    role: str
    content: str


def _message(i: int) -> Any:
    kind = AIMessage if i % 2 else HumanMessage
    return kind(content=f"message {i}", id=f"m{i}")


def _ordered(i: int) -> Any:
    return OrderedDict(role="user", content=f"message {i}")


def _default(i: int) -> Any:
    made: defaultdict[str, Any] = defaultdict(list)
    made["content"] = f"message {i}"
    return made


# every kind of item a node may hold in a list channel, and what can be assigned on it
MAKERS: dict[str, Callable[[int], Any]] = {
    "message": _message,
    "slots dataclass": lambda i: Slotted("user", f"message {i}"),
    "dataclass": lambda i: Plain("user", f"message {i}"),
    "pydantic": lambda i: Model(role="user", content=f"message {i}"),
    "dict": lambda i: {"role": "user", "content": f"message {i}"},
    "OrderedDict": _ordered,
    "defaultdict": _default,
    "list": lambda i: ["user", f"message {i}"],
}


def _assign(item: Any, how: int, value: str) -> None:
    """One assignment on ``item`` itself, of a kind picked by ``how``."""
    if isinstance(item, list):
        if how % 3 == 0:
            item[-1] = value
        elif how % 3 == 1:
            item.append(value)
        elif len(item) > 1:
            item.pop()
        else:
            item.insert(0, value)
    elif isinstance(item, dict):
        if how % 3 == 0:
            item["content"] = value
        elif how % 3 == 1:
            item[f"k{len(item)}"] = value
        elif len(item) > 1:
            del item[next(iter(item))]
        else:
            item["role"] = value
    elif isinstance(item, (AIMessage, HumanMessage)):
        setattr(item, ("content", "name", "id")[how % 3], value)
    else:
        setattr(item, ("content", "role")[how % 2], value)


def _encoded(codec: Codec, items: list[Any], version: str, known: Any) -> tuple[bytes, Any]:
    return codec._value("messages", items, version, known, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(sorted(MAKERS)), min_size=1, max_size=6),
    rounds=st.lists(
        st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=4),
        min_size=1,
        max_size=4,
    ),
)
def test_any_assignment_on_a_held_item_is_stored_as_a_fresh_encoding_gives(
    kinds: list[str], rounds: list[list[tuple[int, int]]]
) -> None:
    serde = JsonPlusSerializer()
    reusing, whole = Codec(serde, 1 << 30, reuse_items=True), Codec(serde, 1 << 30)
    items = [MAKERS[kind](i) for i, kind in enumerate(kinds)]
    # the saver without reuse_items compares bytes: its tails are right by construction
    _, known = _encoded(reusing, items, "v0", None)
    _, known_whole = _encoded(whole, items, "v0", None)
    for n, assignments in enumerate(rounds, start=1):
        for at, how in assignments:
            _assign(items[at % len(items)], how, f"assigned {n}.{at}.{how}")
        items = [*items, MAKERS[kinds[n % len(kinds)]](100 + n)]
        raw, known = _encoded(reusing, items, f"v{n}", known)
        raw_whole, known_whole = _encoded(whole, items, f"v{n}", known_whole)
        assert raw == raw_whole


def test_an_item_of_a_type_it_cannot_look_into_is_encoded_again() -> None:
    serde = JsonPlusSerializer()
    reusing, whole = Codec(serde, 1 << 30, reuse_items=True), Codec(serde, 1 << 30)
    items: list[Any] = [bytearray(b"abc"), "x"]
    _, known = _encoded(reusing, items, "v0", None)
    _, known_whole = _encoded(whole, items, "v0", None)
    items[0][0] = ord("z")
    items.append("y")
    assert _encoded(reusing, items, "v1", known)[0] == _encoded(whole, items, "v1", known_whole)[0]


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _put(
    saver: BaseCheckpointSaver[Any], parent: dict[str, Any] | None, items: list[Any], step: int
) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": "t", "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    version = saver.get_next_version(None if step == 0 else str(step), None)
    checkpoint = generate_checkpoint(
        channel_values={"messages": list(items)}, channel_versions={"messages": version}
    )
    return dict(
        saver.put(
            {"configurable": configurable},
            checkpoint,
            generate_metadata(step=step),
            {"messages": version},
        )
    )


@pytest.mark.parametrize(
    ("make", "assign"),
    [
        (MAKERS["slots dataclass"], lambda item: setattr(item, "content", "changed")),
        (MAKERS["OrderedDict"], lambda item: item.__setitem__("content", "changed")),
        (MAKERS["defaultdict"], lambda item: item.__setitem__("content", "changed")),
        (MAKERS["list"], lambda item: item.__setitem__(1, "changed")),
    ],
    ids=["dataclass(slots=True) attribute", "OrderedDict key", "defaultdict key", "list element"],
)
def test_every_reader_reads_what_inmemorysaver_reads_after_an_assignment(
    client: redis.Redis, prefix: str, make: Callable[[int], Any], assign: Callable[[Any], None]
) -> None:
    saver = RedisStreamSaver(client, prefix=prefix, reuse_items=True)
    memory = InMemorySaver()
    items = [make(i) for i in range(3)]
    parents: dict[int, dict[str, Any] | None] = {id(saver): None, id(memory): None}
    for step in range(3):
        for s in (saver, memory):
            parents[id(s)] = _put(s, parents[id(s)], items, step)
        assign(items[step])
        items = [*items, make(10 + step)]
    cold = RedisStreamSaver(client, prefix=prefix)
    for reader in (saver, cold):
        got = [
            t.checkpoint["channel_values"]["messages"]
            for t in reader.list({"configurable": {"thread_id": "t"}})
        ]
        want = [
            t.checkpoint["channel_values"]["messages"]
            for t in memory.list({"configurable": {"thread_id": "t"}})
        ]
        assert got == want
