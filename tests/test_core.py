"""The I/O-free core, driven by hand: what it sends, and what it makes of replies."""

from __future__ import annotations

from types import ModuleType

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import streamsaver
from streamsaver import UnsupportedServerError
from streamsaver.checkpoint.ops import Operations
from streamsaver.core.codec import Codec
from streamsaver.core.flow import Call
from streamsaver.core.server import server_version


def _ops() -> Operations:
    return Operations("p", Codec(JsonPlusSerializer(), 1024))


@pytest.mark.parametrize("version", ["6.0.16", "5.0.7", "6.1.99"])
def test_servers_older_than_6_2_are_refused_with_the_remedy(version: str) -> None:
    flow = _ops().setup()
    assert flow.send(None) == Call(("INFO",))
    with pytest.raises(UnsupportedServerError, match=rf"Redis {version} is too old.*>= 6\.2"):
        flow.send({"redis_version": version})


def test_supported_servers_pass_and_clusters_need_every_node() -> None:
    assert server_version({"redis_version": "7.4.1"}) == (7, 4, 1)
    assert server_version({"redis_version": "6.2.14"}) == (6, 2, 14)
    nodes = {"a:1": {"redis_version": "7.2.4"}, "b:2": {"redis_version": "6.0.1"}}
    assert server_version(nodes) == (6, 0, 1)


def test_public_names_are_exactly_all() -> None:
    public = {
        name
        for name in dir(streamsaver)
        if not name.startswith("_") and not isinstance(getattr(streamsaver, name), ModuleType)
    }
    assert public == set(streamsaver.__all__)
    for name in streamsaver.__all__:
        assert getattr(streamsaver, name) is not None
