"""reuse_items=True: list items already stored are encoded and decoded only once, on a real
Redis. What is stored must be the very bytes the whole value encodes to, and what is read the
very value LangGraph put, whatever mix of writers, readers and cache misses."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from uuid import uuid4

import ormsgpack
import pytest
import redis
import redis.asyncio as aredis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Overwrite

from streamsaver import AsyncRedisStreamSaver, RedisStreamSaver
from streamsaver.core.codec import Codec
from streamsaver.core.delta import ENTRY_BYTES, ITEM_BYTES, DeltaCache, Known
from streamsaver.core.keys import thread_keys

from . import graphs
from .keyspace import drop_keys
from .test_conformance import _assert_all_passed
from .test_delta import Thread
from .test_graphs import assert_same


class Recording(JsonPlusSerializer):
    """A JsonPlusSerializer that notes how many items each list it encodes or decodes holds."""

    def __init__(self) -> None:
        super().__init__()
        self.dumped: list[int] = []
        self.loaded: list[int] = []

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, list):
            self.dumped.append(len(obj))
        return super().dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        value = super().loads_typed(data)
        if isinstance(value, list):
            self.loaded.append(len(value))
        return value


def _message(i: int) -> AnyMessage:
    kind = HumanMessage if i % 2 else AIMessage
    return kind(content=f"message {i} " + "word " * (i % 7), id=f"m{i}")


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _saver(client: redis.Redis, prefix: str, **options: Any) -> RedisStreamSaver:
    return RedisStreamSaver(client, prefix=prefix, reuse_items=True, **options)


def _conversation(thread: Thread, turns: int) -> Iterator[list[AnyMessage]]:
    """Puts a conversation one message longer at each turn; its messages after each put."""
    messages: list[AnyMessage] = []
    for i in range(turns):
        messages = [*messages, _message(i)]
        thread.put(messages=messages)
        yield messages


def _stored_values(client: redis.Redis, prefix: str, thread_id: str) -> list[bytes]:
    return [
        raw
        for _, fields in client.xrange(thread_keys(prefix, thread_id).log)
        for name, raw in fields.items()
        if name[:1] == b"b" and name[1:].isdigit()
    ]


def test_put_stores_the_bytes_the_whole_value_encodes_to() -> None:
    serde = JsonPlusSerializer()
    whole, reusing = Codec(serde, 1 << 30), Codec(serde, 1 << 30, reuse_items=True)
    messages = [_message(i) for i in range(40)]
    known_whole = known_reuse = None
    for n in range(1, 41):
        value = messages[:n]
        raw_whole, known_whole = whole._value("messages", value, f"i{n}", known_whole, None)
        raw_reuse, known_reuse = reusing._value("messages", value, f"i{n}", known_reuse, None)
        assert raw_reuse == raw_whole
        assert known_whole is not None and known_reuse is not None
        assert known_reuse.body == known_whole.body
        assert known_reuse.items == value and known_whole.items is None


def test_put_encodes_only_the_new_items_and_reads_decode_only_them(
    client: redis.Redis, prefix: str
) -> None:
    serde = Recording()
    thread = Thread(_saver(client, prefix, serde=serde))
    *_, messages = _conversation(thread, 30)
    # the first put encodes the whole list, every later one the message it appends
    assert [n for n in serde.dumped if n != 0] == [1] * 30
    first = thread.saver.get_tuple(thread.parent or {})
    assert first is not None
    got = first.checkpoint["channel_values"]["messages"]
    assert got == messages
    # what the saver put is what it holds: nothing is decoded, and the objects are the ones put
    assert serde.loaded == []
    assert all(a is b for a, b in zip(got, messages, strict=True))
    assert got is not messages


def test_two_savers_interleaving_reads_and_writes_read_back_exactly(
    client: redis.Redis, prefix: str
) -> None:
    """Each saver's cache misses what the other wrote; the plain saver beside them decodes
    every value whole from the same log."""
    rng = random.Random(7)
    a, b = _saver(client, prefix), _saver(client, prefix)
    plain = RedisStreamSaver(client, prefix=prefix)
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    expected: list[AnyMessage] = []
    configs: list[tuple[dict[str, Any], list[AnyMessage]]] = []
    for step in range(120):
        writer = a if rng.random() < 0.5 else b
        got = writer.get_tuple(config) if step else None
        base = got.checkpoint["channel_values"]["messages"] if got else []
        assert base == expected
        edit = rng.random()
        if edit < 0.1 and base:
            # a message edited by id: a new object in place of the stored one
            at = rng.randrange(len(base))
            new = [*base[:at], base[at].model_copy(update={"content": f"edited {step}"})]
            new += base[at + 1 :]
        elif edit < 0.15 and base:
            new = [m for m in base if m.id != base[rng.randrange(len(base))].id]
        else:
            new = [*base, _message(step)]
        expected = new
        thread = Thread(writer)
        thread.parent = config if step else None
        if got:
            thread.versions = dict(got.checkpoint["channel_versions"])
        config = thread.put(messages=new)
        configs.append((config, list(new)))
        for reader in rng.sample([a, b, plain], 2):
            again = reader.get_tuple(config)
            assert again is not None
            assert again.checkpoint["channel_values"]["messages"] == expected
    for saver in (a, b, plain):
        for at, (past, value) in enumerate(configs):
            if at % 10 == 0:
                old = saver.get_tuple(past)
                assert old is not None
                assert old.checkpoint["channel_values"]["messages"] == value
        listed = list(saver.list({"configurable": {"thread_id": "t"}}, limit=30))
        assert [t.checkpoint["channel_values"]["messages"] for t in listed] == [
            v for _, v in reversed(configs[-30:])
        ]


def test_stored_bytes_are_those_of_a_saver_without_it(client: redis.Redis, prefix: str) -> None:
    """A conversation put through both kinds of saver, to two threads: every stored value is
    the same bytes, apart from the event ids a part naming a write's bytes carries."""
    plain = RedisStreamSaver(client, prefix=prefix)
    reusing = _saver(client, prefix)
    threads = {"plain": Thread(plain, "plain"), "reuse": Thread(reusing, "reuse")}
    messages: list[AnyMessage] = []
    for i in range(60):
        messages = [*messages, _message(i)]
        for thread in threads.values():
            thread.put(messages=messages, step=i)
    assert _stored_values(client, prefix, "plain") == _stored_values(client, prefix, "reuse")


def test_a_cache_evicted_mid_conversation_reads_and_writes_exactly(
    client: redis.Redis, prefix: str
) -> None:
    serde = Recording()
    saver = _saver(client, prefix, serde=serde)
    thread = Thread(saver)
    messages: list[AnyMessage] = []
    for i in range(50):
        messages = [*messages, _message(i)]
        thread.put(messages=messages)
        if i % 9 == 4:
            saver._ops.cache.drop_thread("t")  # type: ignore[union-attr]
        if i % 5 == 0:
            got = saver.get_tuple(thread.parent or {})
            assert got is not None
            assert got.checkpoint["channel_values"]["messages"] == messages
            messages = got.checkpoint["channel_values"]["messages"]
    thread.assert_reads_back()
    # after an eviction the next put encodes the whole list again: nothing it held is trusted
    assert max(serde.dumped) > 1


def test_a_tiny_cache_still_reads_back_exactly(client: redis.Redis, prefix: str) -> None:
    thread = Thread(_saver(client, prefix, delta_cache_bytes=2000))
    list(_conversation(thread, 40))
    thread.assert_reads_back()


def test_encrypted_values_are_stored_whole_and_read_back(client: redis.Redis, prefix: str) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    thread = Thread(_saver(client, prefix, serde=serde))
    for messages in _conversation(thread, 20):
        got = thread.saver.get_tuple(thread.parent or {})
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"] == messages
    thread.assert_reads_back()
    types = {ormsgpack.unpackb(raw)[0] for raw in _stored_values(client, prefix, "t")}
    # ciphertext has no items to append to: every value is stored whole, encrypted
    assert types == {"msgpack+aes"}
    assert b"message 3" not in b"".join(_stored_values(client, prefix, "t"))


def test_values_that_are_not_plain_lists_are_encoded_whole(
    client: redis.Redis, prefix: str
) -> None:
    saver = _saver(client, prefix)
    plain = RedisStreamSaver(client, prefix=prefix)
    thread = Thread(saver)
    for i in range(6):
        thread.put(items=tuple(range(i)), words=[f"w{j}" for j in range(i)], n=i)
    # a tuple's items are not kept: only a list comes back as the value put
    known = saver._ops.cache.get(("t", "", "items"))  # type: ignore[union-attr]
    assert isinstance(known, Known) and known.count == 5 and known.items is None
    for config, _ in thread.history:
        # a tuple comes back as the serde decodes it (a list), with or without reuse_items
        ours, theirs = saver.get_tuple(config), plain.get_tuple(config)
        assert ours is not None and theirs is not None
        assert ours.checkpoint["channel_values"] == theirs.checkpoint["channel_values"]


def test_the_cache_bound_counts_held_objects_and_keeps_the_bytes_when_they_do_not_fit() -> None:
    body = b"x" * 100
    cache = DeltaCache(ENTRY_BYTES + len(body) + 2 * ITEM_BYTES)
    cache.put(("t", "", "c"), Known("i1", "1-1 b0", body, 2, 0, 0, 101, ["a", "b"]))
    held = cache.get(("t", "", "c"))
    assert held is not None and held.items == ["a", "b"]
    assert cache.nbytes == ENTRY_BYTES + len(body) + 2 * ITEM_BYTES
    cache.put(("t", "", "c"), Known("i2", "1-2 b0", body, 3, 0, 0, 101, ["a", "b", "c"]))
    held = cache.get(("t", "", "c"))
    # three objects are beyond the bound, the bytes are not: appends go on, decoding is whole
    assert held is not None and held.version == "i2" and held.items is None
    assert cache.nbytes == ENTRY_BYTES + len(body)


# -- real graphs: the state after every step equals InMemorySaver's


def _chat_graph(checkpointer: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        messages = state["messages"]
        last = messages[-1]
        text = str(last.content)
        if text.startswith("forget") and len(messages) > 3:
            return {"messages": [RemoveMessage(id=messages[1].id or "")]}
        if text.startswith("fix") and len(messages) > 2:
            return {"messages": [AIMessage(content=f"fixed: {text}", id=messages[2].id)]}
        # no id: add_messages assigns one, as for a model's reply
        return {"messages": [AIMessage(content=f"echo {len(messages)}: {text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


def _inputs(n: int) -> list[str]:
    return [
        ("forget " if i % 11 == 5 else "fix " if i % 13 == 7 else "") + f"q{i}" for i in range(n)
    ]


def _without_generated_ids(value: Any) -> Any:
    # add_messages gives id-less messages uuid4 ids, which differ between two runs
    return [(type(m).__name__, m.content) for m in value]


def test_a_chat_graph_matches_inmemorysaver_step_by_step(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        ours = _chat_graph(_saver(client, prefix))
        other = _saver(client, prefix)  # a second process reading the same threads
        theirs = _chat_graph(InMemorySaver())
        config = {"configurable": {"thread_id": "chat"}}
        for text in _inputs(80):
            got = ours.invoke({"messages": [HumanMessage(content=text)]}, config)
            want = theirs.invoke({"messages": [HumanMessage(content=text)]}, config)
            assert _without_generated_ids(got["messages"]) == _without_generated_ids(
                want["messages"]
            )
            state = ours.get_state(config).values["messages"]
            assert state == got["messages"]
            read = other.get_tuple(config)
            assert read is not None
            assert read.checkpoint["channel_values"]["messages"] == state
        ours_history = [
            _without_generated_ids(s.values.get("messages", []))
            for s in ours.get_state_history(config)
        ]
        theirs_history = [
            _without_generated_ids(s.values.get("messages", []))
            for s in theirs.get_state_history(config)
        ]
        assert ours_history == theirs_history
    finally:
        client.close()


def test_without_it_a_mutated_returned_message_never_reaches_a_later_read(
    client: redis.Redis, prefix: str
) -> None:
    saver = RedisStreamSaver(client, prefix=prefix)
    thread = Thread(saver)
    thread.put(messages=[_message(0), _message(1)])
    got = saver.get_tuple(thread.parent or {})
    assert got is not None
    got.checkpoint["channel_values"]["messages"][0].content = "changed by the caller"
    again = saver.get_tuple(thread.parent or {})
    assert again is not None
    assert again.checkpoint["channel_values"]["messages"][0].content == "message 0 "


def test_ids_add_messages_assigns_in_place_are_stored(redis_url: str, prefix: str) -> None:
    """add_messages gives every id-less message of the existing list an id by assigning it to
    the very object the saver holds: the next put must store the id, as InMemorySaver does."""

    def reset(state: MessagesState) -> dict[str, Any]:
        # Overwrite skips the reducer: id-less messages reach the channel and the checkpoint
        return {"messages": Overwrite([HumanMessage(content="a"), AIMessage(content="b")])}

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo {len(state['messages'])}", id="r")]}

    builder = StateGraph(MessagesState).add_sequence([reset, reply])
    builder.add_edge(START, "reset")
    client = redis.Redis.from_url(redis_url)
    try:
        graph = builder.compile(checkpointer=_saver(client, prefix))
        config = {"configurable": {"thread_id": "ids"}}
        # each put before the next step runs: the step that assigns the ids follows the put
        got = graph.invoke({"messages": []}, config, durability="sync")
        assert [m.id is not None for m in got["messages"]] == [True, True, True]
        read = RedisStreamSaver(client, prefix=prefix).get_tuple(config)
        assert read is not None
        assert read.checkpoint["channel_values"]["messages"] == got["messages"]
    finally:
        client.close()


def _changed_content(message: Any) -> None:
    message.content = "changed after the put"


def _changed_key(message: Any) -> None:
    message["content"] = "changed after the put"


def _added_key(message: Any) -> None:
    message["name"] = "added after the put"


@pytest.mark.parametrize(
    ("make", "change"),
    [
        (_message, _changed_content),
        (lambda i: {"role": "user", "content": f"message {i}"}, _changed_key),
        (lambda i: {"role": "user", "content": f"message {i}"}, _added_key),
    ],
    ids=["message attribute", "dict value", "dict key"],
)
def test_an_attribute_assigned_on_a_held_item_is_encoded_again(
    make: Callable[[int], Any], change: Callable[[Any], None]
) -> None:
    codec = Codec(JsonPlusSerializer(), 1 << 30, reuse_items=True)
    messages = [make(i) for i in range(5)]
    _, known = codec._value("messages", messages, "i1", None, None)
    change(messages[1])
    raw, _ = codec._value("messages", [*messages, make(5)], "i2", known, None)
    whole = Codec(JsonPlusSerializer(), 1 << 30)._value(
        "messages", [*messages, make(5)], "i2", None, None
    )[0]
    assert raw == whole


def test_an_attribute_assigned_on_a_returned_message_never_reaches_a_later_read(
    client: redis.Redis, prefix: str
) -> None:
    saver = _saver(client, prefix)
    thread = Thread(saver)
    thread.put(messages=[_message(0), _message(1)])
    got = saver.get_tuple(thread.parent or {})
    assert got is not None
    got.checkpoint["channel_values"]["messages"][0].content = "changed by the caller"
    got.checkpoint["channel_values"]["messages"][1].name = "renamed by the caller"
    # the server sends nothing new: what the saver holds answers, from its bytes
    again = saver.get_tuple(thread.parent or {})
    assert again is not None
    assert again.checkpoint["channel_values"]["messages"] == [_message(0), _message(1)]


@pytest.fixture
async def aclient(redis_url: str) -> AsyncIterator[aredis.Redis]:
    c = aredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


async def test_async_chat_graph_matches_inmemorysaver(aclient: aredis.Redis, prefix: str) -> None:
    serde = Recording()
    saver = AsyncRedisStreamSaver(aclient, prefix=prefix, reuse_items=True, serde=serde)
    ours = _chat_graph(saver)
    theirs = _chat_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "achat"}}
    for text in _inputs(60):
        got = await ours.ainvoke({"messages": [HumanMessage(content=text)]}, config)
        want = await theirs.ainvoke({"messages": [HumanMessage(content=text)]}, config)
        assert _without_generated_ids(got["messages"]) == _without_generated_ids(want["messages"])
        read = await saver.aget_tuple(config)
        assert read is not None
        assert read.checkpoint["channel_values"]["messages"] == got["messages"]
    # only a put after a RemoveMessage or an edit by id (10 of the 60 inputs) encodes a list
    # longer than the one message appended, and no read decodes a list: the saver holds them
    whole = [i for i in _inputs(60) if i.startswith(("forget", "fix"))]
    assert len([n for n in serde.dumped if n > 1]) <= len(whole) == 10
    assert serde.loaded == []


def test_changing_a_returned_list_never_changes_a_later_read(
    client: redis.Redis, prefix: str
) -> None:
    """The list is the caller's own: only its items are shared (the contract of reuse_items)."""
    saver = _saver(client, prefix)
    thread = Thread(saver)
    messages = [_message(i) for i in range(5)]
    thread.put(messages=messages)
    for _ in range(2):
        got = saver.get_tuple(thread.parent or {})
        assert got is not None
        value = got.checkpoint["channel_values"]["messages"]
        assert value == messages
        value.append(_message(99))
        value.pop(0)
        value.reverse()
    messages.clear()
    again = saver.get_tuple(thread.parent or {})
    assert again is not None
    assert again.checkpoint["channel_values"]["messages"] == [_message(i) for i in range(5)]


async def test_async_reads_and_writes_with_evictions_read_back_exactly(
    aclient: aredis.Redis, prefix: str
) -> None:
    writer = AsyncRedisStreamSaver(aclient, prefix=prefix, reuse_items=True)
    reader = AsyncRedisStreamSaver(aclient, prefix=prefix, reuse_items=True)
    config: dict[str, Any] = {"configurable": {"thread_id": "a", "checkpoint_ns": ""}}
    messages: list[AnyMessage] = []
    puts: list[tuple[Any, list[AnyMessage]]] = []
    for i in range(40):
        messages = [*messages, _message(i)]
        parent = await writer.aget_tuple(config) if puts else None
        checkpoint = generate_checkpoint(
            channel_values={"messages": messages}, channel_versions={"messages": i + 1}
        )
        config = dict(
            await writer.aput(
                parent.config if parent else config,
                checkpoint,
                generate_metadata(step=i),
                {"messages": i + 1},
            )
        )
        puts.append((config, list(messages)))
        if i % 7 == 3:
            writer._ops.cache.drop_thread("a")  # type: ignore[union-attr]
        got = await reader.aget_tuple(config)
        assert got is not None
        assert got.checkpoint["channel_values"]["messages"] == messages
        messages = got.checkpoint["channel_values"]["messages"]
    listed = [t async for t in reader.alist({"configurable": {"thread_id": "a"}})]
    assert [t.checkpoint["channel_values"]["messages"] for t in listed] == [
        v for _, v in reversed(puts)
    ]


# -- every scenario of tests/graphs.py, as test_graphs.py runs it, with reuse_items

_SCENARIOS = [
    graphs.linear,
    graphs.hitl,
    graphs.parallel_interrupts,
    graphs.time_travel,
    graphs.subgraph,
    graphs.send_fanout,
    graphs.long_thread,
    graphs.stateful_replay,
    graphs.stateful_interrupt,
    graphs.subgraph_time_travel,
]
_ASYNC_SCENARIOS = [
    graphs.alinear,
    graphs.ahitl,
    graphs.aparallel_interrupts,
    graphs.atime_travel,
    graphs.asubgraph,
    graphs.asend_fanout,
    graphs.along_thread,
    graphs.astateful_replay,
    graphs.astateful_interrupt,
    graphs.asubgraph_time_travel,
]


@pytest.mark.parametrize("scenario", _SCENARIOS, ids=lambda f: f.__name__)
def test_graph_scenarios_match_inmemorysaver(
    client: redis.Redis, prefix: str, scenario: Callable[[Any], graphs.Observed]
) -> None:
    assert_same(scenario(_saver(client, prefix)), scenario(InMemorySaver()))


@pytest.mark.parametrize("scenario", _ASYNC_SCENARIOS, ids=lambda f: f.__name__)
async def test_async_graph_scenarios_match_inmemorysaver(
    aclient: aredis.Redis,
    prefix: str,
    scenario: Callable[[Any], Awaitable[graphs.Observed]],
) -> None:
    saver = AsyncRedisStreamSaver(aclient, prefix=prefix, reuse_items=True)
    assert_same(await scenario(saver), await scenario(InMemorySaver()))


async def test_the_conformance_suite_passes_with_it(redis_url: str) -> None:
    prefixes: list[str] = []

    async def factory() -> AsyncIterator[AsyncRedisStreamSaver]:
        prefixes.append(f"reuse{uuid4().hex[:8]}")
        client = aredis.Redis.from_url(redis_url)
        yield AsyncRedisStreamSaver(client, prefix=prefixes[-1], reuse_items=True)
        await client.aclose()

    try:
        _assert_all_passed(await validate(checkpointer_test(name="reuse_items")(factory)))
    finally:
        client = redis.Redis.from_url(redis_url)
        for prefix in prefixes:
            drop_keys(client, prefix)
        client.close()
