"""The console's one saver per app, and the serde it reads values with."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..checkpoint.aio import AsyncRedisStreamSaver
from . import _views
from ._hub import FeedHub

__all__ = ["Console"]


class Console:
    """The saver the routes read through, made on first use inside the server's event loop
    (a mounted app gets no lifespan of its own), with a serde that shows what it cannot
    decode (ciphertext without the key) as such instead of failing the page."""

    def __init__(
        self, source: str | AsyncRedisStreamSaver, prefix: str, key: bytes | str | None
    ) -> None:
        self.source = source
        self.prefix = prefix
        self.key = key
        self._saver: AsyncRedisStreamSaver | None = None
        self.serde: SerializerProtocol = JsonPlusSerializer()  # what the writers used
        self._lock = asyncio.Lock()
        self._stack = AsyncExitStack()
        self.hub: FeedHub | None = None

    def _serde(self, base: SerializerProtocol | None) -> SerializerProtocol:
        if self.key is not None:
            from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

            key = self.key.encode() if isinstance(self.key, str) else self.key
            base = EncryptedSerializer.from_pycryptodome_aes(key=key)
        self.serde = base or self.serde
        return _views.Sealing(self.serde)

    async def saver(self) -> AsyncRedisStreamSaver:
        async with self._lock:
            if self._saver is None:
                if isinstance(self.source, AsyncRedisStreamSaver):
                    given = self.source
                    self._saver = AsyncRedisStreamSaver(
                        given.client,
                        prefix=given.prefix,
                        serde=self._serde(given.serde),
                        allow_eviction=True,  # it only reads (as for a URL, below)
                    )
                else:
                    self._saver = await self._stack.enter_async_context(
                        AsyncRedisStreamSaver.from_conn_string(
                            self.source,
                            prefix=self.prefix,
                            serde=self._serde(None),
                            # it only reads: the server's eviction policy is the writers' call
                            allow_eviction=True,
                        )
                    )
                self.hub = FeedHub(self._saver)
            return self._saver

    async def close(self) -> None:
        if self.hub is not None:
            await self.hub.close()
        await self._stack.aclose()
        self._saver = None
