"""Stored responses of POST /v5/responses: an account's inputs and outputs, kept so that a response
can be retrieved, listed, deleted and chained onto (`previous_response_id`), for a bounded time.

What is kept works on the contract's wire dicts (openapi.json `Response` and the input items), not
on the core's types: the store keeps what the client was answered, whatever the planner became.

- A response belongs to its account. Every read is scoped to it, and another account's id is
  answered exactly as an unknown one (`ResponseNotFound`): the store never confirms that an id
  exists elsewhere.
- `store: false` keeps nothing: such a response cannot be retrieved or chained onto.
- Retention: a response is visible until `retention` after its creation, then answered as not
  found even before `purge` removes it, so the rule does not wait on a purge having run.
- Deleting removes the rows (the response and its items), not a flag: the data is gone.
- Every function takes `now`: the clock is the caller's, so tests move it instead of waiting.
- JSON is written by orjson, except where a client's JSON holds a lone surrogate (`"\\ud800"`), which
  neither orjson nor either database's UTF-8 text takes: that one is written ASCII-only (escaped),
  and kept exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
from sqlalchemy import and_, delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.ids import ids
from gateway.store.sqlite_writer import sqlite_time
from gateway.store.tables import response_items, responses

# The prefix of an item id the store gives an item that came without one, by item type (OpenAI's).
ITEM_ID_PREFIXES = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_",
                    "reasoning": "rs_"}
MAX_PAGE = 100  # input_items' largest `limit`, as the contract's


class ResponseNotFound(LookupError):
    """No stored response of this id is visible to this account: unknown, another account's,
    deleted, expired or never stored. The message names the id only, never why."""

    code = "response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(f"No response with id '{response_id}' was found.")
        self.response_id = response_id


class ItemNotFound(ResponseNotFound):
    """`after` or `before` names no input item of the response."""

    code = "item_not_found"

    def __init__(self, response_id: str, item_id: str) -> None:
        LookupError.__init__(self, f"No input item with id '{item_id}' in response '{response_id}'.")
        self.response_id, self.item_id = response_id, item_id


class ChainTooLong(ValueError):
    """A `previous_response_id` chain holds more responses, or more bytes, than the gateway reads
    back (GATEWAY_RESPONSES_MAX_CHAIN, GATEWAY_RESPONSES_MAX_CHAIN_BYTES): a 400 naming
    `previous_response_id`."""

    code = "conversation_too_long"

    def __init__(self, response_id: str, what: Literal["responses", "bytes"], limit: int) -> None:
        super().__init__(f"The conversation of previous_response_id '{response_id}' holds more than {limit} "
                         f"{what} (GATEWAY_RESPONSES_MAX_CHAIN{'_BYTES' if what == 'bytes' else ''}).")
        self.response_id, self.what, self.limit = response_id, what, limit


@dataclass(frozen=True, slots=True)
class ItemPage:
    """A page of a response's input items, as OpenAI's list object has it."""

    data: list[dict[str, Any]]
    has_more: bool

    def wire(self) -> dict[str, Any]:
        """The contract's `ResponseInputItemList`."""
        return {"object": "list", "data": self.data,
                "first_id": self.data[0]["id"] if self.data else None,
                "last_id": self.data[-1]["id"] if self.data else None,
                "has_more": self.has_more}


def with_ids(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` with an `id` on each (a new one where an item had none), and `type` on a message that
    left it out: what input_items lists, and what a chain gives back."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        item = {"type": kind, **item}
        if not item.get("id"):
            item["id"] = ITEM_ID_PREFIXES.get(kind, "item_") + ids.next()
        out.append(item)
    return out


def _dump(value: Any) -> str:
    try:  # (json.dumps was most of the Python a save takes)
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # a lone surrogate (or an integer beyond 64 bits)
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


_HEAD = ("id", "account_id", "created_at", "status", "previous_response_id", "bytes", "body")
_ITEM = ("response_id", "kind", "position", "item_id", "body")
# The driver's SQL of a save, by dialect (positional parameters, in the columns' order above):
# the writer's batches skip SQLAlchemy's statement building and per-value processing, and take the
# same path as store/sqlite_writer.py's thread on SQLite or a connection of the engine's. Normally
# no response was kept under an id before (ids are 128 random bits); a batch retried after an
# uncertain commit, or a response saved again, replaces its items and its row, and keeps the row's
# first `created_at`.
_REPLACED = ", ".join(f"{name} = excluded.{name}" for name in _HEAD if name not in ("id", "created_at"))
_SAVE = {
    dialect: (f"DELETE FROM response_items WHERE response_id = {mark(1)}",
              (f"INSERT INTO responses ({', '.join(_HEAD)}) VALUES ({', '.join(map(mark, range(1, 8)))}) "
               f"ON CONFLICT (id) DO UPDATE SET {_REPLACED}"),
              f"INSERT INTO response_items ({', '.join(_ITEM)}) VALUES ({', '.join(map(mark, range(1, 6)))})")
    for dialect, mark in (("sqlite", lambda i: "?"), ("postgresql", lambda i: f"${i}"))}


def _as_given(at: datetime) -> datetime:
    return at


def statements(batch: Sequence[tuple[str, dict[str, Any], Sequence[dict[str, Any]], datetime]],
               dialect: str) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """What saves each (account id, response, input items, now) of `batch`: per statement, the
    driver's SQL and its rows of values (executemany), responses saying `store: false` left out.
    The response's `output` becomes its output items, the rest of it the row's body."""
    stamp = sqlite_time if dialect == "sqlite" else _as_given  # (UTCDateTime's text on SQLite)
    removed, heads, items = [], [], []
    for account_id, response, input_items, now in batch:
        if response.get("store") is False:
            continue
        response_id = response["id"]
        body = _dump({name: value for name, value in response.items() if name != "output"})
        size = len(body)
        for kind, kept in (("input", with_ids(input_items)), ("output", response.get("output") or ())):
            for position, item in enumerate(kept):
                text = _dump(item)
                size += len(text)
                items.append((response_id, kind, position, item["id"], text))
        removed.append((response_id,))
        heads.append((response_id, account_id, stamp(now), response["status"],
                       response.get("previous_response_id"), size, body))
    if not heads:
        return []
    delete_items, upsert, insert_item = _SAVE[dialect]
    return [(delete_items, removed), (upsert, heads)] + ([(insert_item, items)] if items else [])


@dataclass(frozen=True, slots=True)
class ResponseStore:
    """The stored responses, under one retention and one bound on the chains read back."""

    retention: timedelta
    max_chain: int = 256
    max_chain_bytes: int = 32 << 20

    @classmethod
    def from_settings(cls, settings: Any) -> ResponseStore:
        """The store `Settings` (gateway/core/config.py) describe."""
        return cls(retention=timedelta(days=settings.responses_retention_days),
                   max_chain=settings.responses_max_chain, max_chain_bytes=settings.responses_max_chain_bytes)

    def _visible(self, account_id: str, response_id: str, now: datetime) -> Any:
        return and_(responses.c.id == response_id, responses.c.account_id == account_id,
                    responses.c.created_at > now - self.retention)

    async def save(self, connection: AsyncConnection, account_id: str, response: dict[str, Any],
                   input_items: Sequence[dict[str, Any]], now: datetime) -> bool:
        """Keep `response` (the wire object: its `output` becomes its items) and the `input_items` it
        was given, replacing what was kept under its id before. False, and nothing kept, when the
        response says `store: false`. `created_at` is `now` the first time; a later save keeps the
        first."""
        if response.get("store") is False:
            return False
        await self.save_many(connection, [(account_id, response, input_items, now)])
        return True

    async def save_many(self, connection: AsyncConnection,
                        batch: Sequence[tuple[str, dict[str, Any], Sequence[dict[str, Any]], datetime]]) -> None:
        """`save` of each (account id, response, input items, now) at once, in three statements
        whatever their number (`statements`); a response saying `store: false` is left out."""
        for sql, rows in statements(batch, connection.dialect.name):
            await connection.exec_driver_sql(sql, rows)

    async def get(self, connection: AsyncConnection, account_id: str, response_id: str,
                  now: datetime) -> dict[str, Any]:
        """The stored response, its output included, as it was answered."""
        body = (await connection.execute(select(responses.c.body).where(
            self._visible(account_id, response_id, now)))).scalar()
        if body is None:
            raise ResponseNotFound(response_id)
        output = (await connection.execute(
            select(response_items.c.body).where(response_items.c.response_id == response_id,
                                                response_items.c.kind == "output")
            .order_by(response_items.c.position))).scalars().all()
        return {**json.loads(body), "output": [json.loads(text) for text in output]}

    async def delete(self, connection: AsyncConnection, account_id: str, response_id: str,
                     now: datetime) -> dict[str, Any]:
        """Remove the response and its items; OpenAI's deletion object."""
        found = (await connection.execute(select(responses.c.id).where(
            self._visible(account_id, response_id, now)))).scalar()
        if found is None:
            raise ResponseNotFound(response_id)
        await connection.execute(delete(response_items).where(response_items.c.response_id == response_id))
        await connection.execute(delete(responses).where(responses.c.id == response_id))
        return {"id": response_id, "object": "response", "deleted": True}

    async def input_items(self, connection: AsyncConnection, account_id: str, response_id: str,
                          now: datetime, *, after: str | None = None, before: str | None = None,
                          limit: int = 20, order: Literal["asc", "desc"] = "desc") -> ItemPage:
        """A page of the items the response was given (its own `input`, not its chain's), in
        `order` of their place in the input, starting after `after` and stopping before `before`
        (item ids, in that order)."""
        if (await connection.execute(select(responses.c.id).where(
                self._visible(account_id, response_id, now)))).scalar() is None:
            raise ResponseNotFound(response_id)
        limit = max(1, min(limit, MAX_PAGE))
        mine = and_(response_items.c.response_id == response_id, response_items.c.kind == "input")
        position = response_items.c.position
        query = select(response_items.c.body).where(mine)
        forward = order == "asc"
        for item_id, is_after in ((after, True), (before, False)):
            if item_id is None:
                continue
            at = (await connection.execute(select(position).where(mine, response_items.c.item_id == item_id)
                                           .order_by(position).limit(1))).scalar()
            if at is None:
                raise ItemNotFound(response_id, item_id)
            query = query.where(position > at if is_after == forward else position < at)
        rows = (await connection.execute(
            query.order_by(position if forward else position.desc()).limit(limit + 1))).scalars().all()
        return ItemPage(data=[json.loads(text) for text in rows[:limit]], has_more=len(rows) > limit)

    async def chain(self, connection: AsyncConnection, account_id: str, response_id: str,
                    now: datetime) -> list[dict[str, Any]]:
        """The conversation `previous_response_id = response_id` continues: the input and output
        items of each response of its chain, oldest first (instructions are not items: they are
        not carried over). Any response of the chain that is not visible to the account makes
        the whole a `ResponseNotFound` of `response_id`; past the bounds, `ChainTooLong`."""
        order: list[str] = []
        total, at = 0, response_id
        while at is not None:
            if len(order) == self.max_chain:
                raise ChainTooLong(response_id, "responses", self.max_chain)
            row = (await connection.execute(select(responses.c.previous_response_id, responses.c.bytes).where(
                self._visible(account_id, at, now)))).first()
            if row is None or at in order:
                raise ResponseNotFound(response_id)
            order.append(at)
            total += row.bytes
            if total > self.max_chain_bytes:
                raise ChainTooLong(response_id, "bytes", self.max_chain_bytes)
            at = row.previous_response_id
        rank = {rid: index for index, rid in enumerate(reversed(order))}
        rows = (await connection.execute(select(
            response_items.c.response_id, response_items.c.kind, response_items.c.position, response_items.c.body)
            .where(response_items.c.response_id.in_(order)))).all()
        rows = sorted(rows, key=lambda r: (rank[r.response_id], r.kind != "input", r.position))
        return [json.loads(r.body) for r in rows]

    async def purge(self, connection: AsyncConnection, now: datetime, *, batch: int = 1000) -> int:
        """Remove up to `batch` responses past their retention, oldest first, with their items;
        how many. Call it until it returns less than `batch`: each call is one short transaction
        rather than one that holds the database while a backlog is removed."""
        expired = (await connection.execute(select(responses.c.id).where(
            responses.c.created_at <= now - self.retention).order_by(responses.c.created_at).limit(batch))
                   ).scalars().all()
        if expired:
            await connection.execute(delete(response_items).where(response_items.c.response_id.in_(expired)))
            await connection.execute(delete(responses).where(responses.c.id.in_(expired)))
        return len(expired)
