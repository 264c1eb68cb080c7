"""Semantic search of the Store (``index={"dims": N, "embed": ..., "fields": [...]}``).

Which texts of a put are embedded (``InMemoryStore``'s paths and per-put ``index``), how their
vectors ride in the put's event (float32, little-endian, one after another: the precision
pgvector and RediSearch keep), and how a query ranks items (``InMemoryStore``'s cosine and
max pooling over an item's vectors), all I/O-free; only ``embed``/``aembed`` call the model.
"""

from __future__ import annotations

import asyncio
import math
import sys
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    IndexConfig,
    Op,
    PutOp,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)
from langgraph.store.memory import _check_numpy, _cosine_similarity

from ..core.errors import InvalidInputError

__all__ = ["Embedded", "StoreIndex"]

T = TypeVar("T")


class Embedded(NamedTuple):
    """The vectors a batch needs: of each distinct text its puts index, and of each query."""

    documents: dict[str, Sequence[float]]
    queries: dict[str, Sequence[float]]


class StoreIndex:
    """A validated index config and the embeddings it names."""

    def __init__(self, config: object) -> None:
        if not isinstance(config, dict) or not {"dims", "embed"} <= set(config):
            raise InvalidInputError(
                f"index={config!r}: give a dict with 'dims' (the embedding size) and 'embed' "
                f"(an Embeddings, a function of a list of texts, or 'provider:model'), and "
                f"optionally 'fields' (paths into the value, default ['$']), or None"
            )
        dims = config["dims"]
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise InvalidInputError(f"index['dims']={dims!r}: give the embedding size, an int >= 1")
        fields = config.get("fields") or ["$"]
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise InvalidInputError(
                f"index['fields']={fields!r}: give a list of paths into the value, e.g. "
                f"['text', 'notes[*].body'], or leave it out to embed the whole value"
            )
        self.config: IndexConfig = IndexConfig(**config)  # type: ignore[typeddict-item]
        self.dims = dims
        self.embeddings: Embeddings = ensure_embeddings(config["embed"])
        self._fields = [(f, tokenize_path(f) if f != "$" else f) for f in fields]

    def texts(self, op: PutOp) -> list[str]:
        """The texts of a put to embed, as ``InMemoryStore`` picks them; none for a delete or
        ``index=False``."""
        if op.value is None or op.index is False:
            return []
        fields = self._fields if op.index is None else [(f, tokenize_path(f)) for f in op.index]
        return [text for _, path in fields for text in get_text_at_path(op.value, path)]

    def needed(self, ops: Sequence[Op]) -> tuple[list[str], list[str]]:
        """The distinct texts (of the last put of each item) and queries a batch embeds."""
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        queries: dict[str, None] = {}
        for op in ops:
            if isinstance(op, PutOp):
                last[(op.namespace, op.key)] = op
            elif isinstance(op, SearchOp) and op.query:
                queries[op.query] = None
        texts = dict.fromkeys(t for op in last.values() for t in self.texts(op))
        return list(texts), list(queries)

    def embed(self, ops: Sequence[Op]) -> Embedded | None:
        texts, queries = self.needed(ops)
        if not texts and not queries:
            return None
        documents = self.embeddings.embed_documents(texts) if texts else []
        vectors = [self.embeddings.embed_query(q) for q in queries]
        return self._checked(texts, documents, queries, vectors)

    async def aembed(self, ops: Sequence[Op]) -> Embedded | None:
        texts, queries = self.needed(ops)
        if not texts and not queries:
            return None
        documents = await self.embeddings.aembed_documents(texts) if texts else []
        vectors = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
        return self._checked(texts, documents, queries, vectors)

    def _checked(
        self,
        texts: list[str],
        documents: Sequence[Sequence[float]],
        queries: list[str],
        vectors: Sequence[Sequence[float]],
    ) -> Embedded:
        if len(documents) != len(texts):
            raise InvalidInputError(
                f"index['embed'] returned {len(documents)} vectors for {len(texts)} texts; it "
                f"must return one per text, in order"
            )
        pairs = [*zip(texts, documents, strict=True), *zip(queries, vectors, strict=True)]
        for text, vector in pairs:
            if len(vector) != self.dims or not all(math.isfinite(x) for x in vector):
                raise InvalidInputError(
                    f"index['embed'] returned {len(vector)} numbers for {text[:40]!r}, some "
                    f"not finite or not index['dims']={self.dims}; set dims to the model's size"
                )
        return Embedded(dict(pairs[: len(texts)]), dict(pairs[len(texts) :]))

    def pack(self, op: PutOp, embedded: Embedded | None) -> bytes:
        """The vectors of a put's texts, for its event's ``vec`` field (b'' for none)."""
        if embedded is None:
            return b""
        packed = array("f", [x for t in self.texts(op) for x in embedded.documents[t]])
        if sys.byteorder == "big":
            packed.byteswap()
        return packed.tobytes()

    def rank(
        self,
        query: Sequence[float],
        candidates: Sequence[tuple[T, bytes]],
        offset: int,
        limit: int,
    ) -> list[tuple[float | None, T]]:
        """``InMemoryStore``'s ranking of ``candidates`` (in the store's order, each with its
        packed vectors): by the best cosine of an item's vectors, ties in candidate order; then,
        if the page is short, items without vectors, unscored (its offset not applied to them,
        as ``InMemoryStore`` does)."""
        owners: list[int] = []
        flat = bytearray()
        width = 4 * self.dims
        for i, (_, raw) in enumerate(candidates):
            # a vector of another size (an index since reconfigured) counts as none
            if raw and len(raw) % width == 0:
                owners += [i] * (len(raw) // width)
                flat += raw
        scores = self._cosines(query, bytes(flat))
        seen: set[int] = set()
        kept: list[tuple[float | None, T]] = []
        for j in _descending(scores):
            i = owners[j]
            if i in seen:
                continue
            seen.add(i)
            if len(seen) > offset + limit:
                break
            if len(seen) > offset:
                kept.append((float(scores[j]), candidates[i][0]))
        if len(kept) < limit:
            scored = set(owners)
            scoreless = [c for i, (c, _) in enumerate(candidates) if i not in scored]
            kept += [(None, c) for c in scoreless[: limit - len(kept)]]
        return kept

    def _cosines(self, query: Sequence[float], flat: bytes) -> Any:
        """The cosine of each vector in ``flat`` with ``query``: a numpy array or a list."""
        if not flat:
            return []
        if _check_numpy():
            import numpy as np

            # InMemoryStore's formula (langgraph's _cosine_similarity), on the packed bytes
            # as they are: its list-of-lists input would cost a float object per number
            x = np.asarray(query, dtype=np.float64)
            y = np.frombuffer(flat, dtype="<f4").astype(np.float64).reshape(-1, self.dims)
            y_norm = np.linalg.norm(y, axis=1)
            mask = y_norm != 0
            similarities = np.zeros_like(y_norm)
            similarities[mask] = np.dot(y[mask], x) / (y_norm[mask] * np.linalg.norm(x))
            return similarities
        values = array("f", flat)
        if sys.byteorder == "big":
            values.byteswap()
        rows = [values[i : i + self.dims].tolist() for i in range(0, len(values), self.dims)]
        return _cosine_similarity(list(query), rows)


def _descending(scores: Any) -> Any:
    """Indexes of ``scores`` from the highest, ties in index order (a stable sort, as
    ``InMemoryStore``'s ``sorted(..., reverse=True)``)."""
    if isinstance(scores, list):
        return sorted(range(len(scores)), key=lambda j: scores[j], reverse=True)
    return (-scores).argsort(kind="stable").tolist()
