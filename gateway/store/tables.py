"""The database's tables, as SQLAlchemy Core metadata: what queries are written against.

The DDL itself lives in the alembic migrations (gateway/migrations/); tests/integration/test_database.py checks
that migrating an empty database yields exactly these tables.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.types import TypeDecorator

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on both databases: PostgreSQL keeps `timestamptz`, SQLite keeps text
    without an offset, which is read back as UTC. Naive datetimes are refused rather than guessed."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


accounts = Table(
    "accounts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),  # public: shown in lists, logs and ledger rows
    Column("digest", String(64), nullable=False, unique=True),  # SHA-256 of the key; the key itself is never stored
    Column("name", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),  # in the future: a rotated key's grace ends then
    Column("scopes", Text, nullable=False, server_default="inference usage"),  # space-separated (store/accounts.py)
    Column("expires_at", UTCDateTime, nullable=True),
    Column("replaced_by", String(32), nullable=True),  # the key a rotation made in its place
    # The first key of its rotation chain (null: this one), under whose id the chain's keys count
    # their limits together (limits/rules.py counted_as).
    Column("lineage", String(32), nullable=True),
    Index(None, "lineage"),
)

key_accounts = Table(
    "key_accounts",
    metadata,
    Column("key_id", String(32), ForeignKey("api_keys.id"), primary_key=True),
    Column("account_id", String(64), ForeignKey("accounts.id"), primary_key=True),
)

# One row per completion request that reached a vendor. No foreign keys on purpose: a row records
# what happened and must be writable whatever becomes of the account or key later.
ledger = Table(
    "ledger",
    metadata,
    Column("request_id", String(64), primary_key=True),  # also makes a retried batch idempotent
    Column("account_id", String(64), nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("vendor", Text, nullable=False),
    Column("model", Text, nullable=False),  # the model that answered: "vendor/name"
    Column("fallback_from", Text, nullable=True),  # the model the client asked for, when a fallback answered
    # The vendor's deployment(s) that served it, by configured name or index; never a key or a URL.
    Column("deployment", Text, nullable=True),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=True),  # null: the vendor did not say
    Column("reasoning_tokens", BigInteger, nullable=True),  # null: the vendor did not say
    Column("estimated", Boolean, nullable=False),  # counted by the gateway, not reported by the vendor
    Column("outcome", String(32), nullable=False),
    Column("streamed", Boolean, nullable=False),
    Column("end_user", Text, nullable=True),  # the request's `user` field ("user" is reserved in SQL)
    Column("started_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=False),
    Column("ttft_ms", Float, nullable=True),  # streams only: until the first text was sent
    # What the request cost, in nano-dollars (store/prices.py), priced when the row was written;
    # null: unpriced (no price was known for the model then), never the same as 0.
    Column("cost_nanos", BigInteger, nullable=True),
    # The endpoint the request came through: "completions" (POST /v5/completions) or "chat".
    Column("endpoint", String(16), nullable=False, server_default="completions"),
    # A `refused` row stands for this many refused requests alike (store/ledger.py `refuse`);
    # null: one (every other row, and refused rows written before rows were shared).
    Column("refusals", BigInteger, nullable=True),
    # A cache hit's (outcome cache_hit, http/cache.py): what its tokens would have cost at the model's
    # price less what the hit cost; null for every other row, and for a hit of an unpriced model.
    Column("saved_nanos", BigInteger, nullable=True),
    Index(None, "account_id", "started_at"),
    Index(None, "started_at"),
    Index(None, "key_id", "started_at"),  # a key's budget is summed from its rows of the period
)

# The ledger's columns in the table's order: what its writers' own INSERTs list (store/ledger.py,
# store/sqlite_writer.py).
LEDGER_COLUMNS = tuple(column.name for column in ledger.columns)

# Ledger rows the database refused for what they hold (not for being away): kept whole, as JSON, so
# that one bad row never blocks the rows behind it and nothing billed is silently lost.
ledger_rejects = Table(
    "ledger_rejects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("request_id", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("row", Text, nullable=False),  # the row as JSON
    Column("rejected_at", UTCDateTime, nullable=False),
)

# Limits on a key or an account (gateway/limits/rules.py); a null column is no limit of that kind.
limits = Table(
    "limits",
    metadata,
    Column("subject", String(8), primary_key=True),  # "key" or "account"
    Column("subject_id", String(64), primary_key=True),  # the key's public id or the account id
    Column("rpm", BigInteger, nullable=True),  # requests per minute
    Column("tpm", BigInteger, nullable=True),  # tokens (prompt + completion) per minute
    Column("concurrent", BigInteger, nullable=True),  # requests in flight
    Column("budget_tokens", BigInteger, nullable=True),  # tokens per budget period
    Column("budget_usd", BigInteger, nullable=True),  # nano-dollars per budget period (store/prices.py)
    Column("budget_period", String(8), nullable=True),  # "day" or "month" (UTC calendar)
    Column("models", Text, nullable=True),  # JSON list of glob patterns the subject may call
    Column("cache", Boolean, nullable=True),  # the response cache's switch (http/cache.py); null: not set
    Column("updated_at", UTCDateTime, nullable=False),
)

# Rollups: the ledger summed per period (an hour, a UTC day or a UTC calendar month) and per account
# and some of model, key, outcome, the request's `user` and its endpoint, kept by the ledger's
# writer in the transaction that writes the rows (store/rollups.py): a report reads whole periods
# from the smallest rollup that has its columns, and only the partial hours at its edges from the
# ledger.
# `has_user` false is a request without `user` (`end_user` is then ''): part of the key, since
# NULLs are never equal in a unique key.
# `requests` reached a vendor; `refused_requests` were refused by a limit before any vendor call.
ROLLUP_MEASURES = ("requests", "estimated_requests", "prompt_tokens", "completion_tokens", "total_tokens",
                   "cached_tokens", "reasoning_tokens", "cost_nanos", "unpriced_requests", "refused_requests",
                   "cache_hits", "saved_nanos")  # `cache_hits` of `requests` were answered from the response cache
# (table, period, dimensions kept), per period the smaller first: `user` has far more values than
# model, key and outcome together, and each dimension kept multiplies the rows.
ROLLUPS = (
    ("usage_monthly", "month", ("model", "key_id", "outcome")),
    # A month per user, all outcomes together: a report per user reads one row per line.
    ("usage_monthly_user_totals", "month", ("user",)),
    ("usage_monthly_users", "month", ("outcome", "user")),
    ("usage_daily_models", "day", ("model",)),
    ("usage_daily_keys", "day", ("key_id",)),
    ("usage_daily", "day", ("model", "key_id", "outcome")),
    ("usage_daily_users", "day", ("outcome", "user")),
    ("usage_hourly_models", "hour", ("model",)),
    ("usage_hourly", "hour", ("model", "key_id", "outcome")),
    ("usage_hourly_users", "hour", ("model", "key_id", "outcome", "user")),  # every dimension but the endpoint
    # The endpoint (completions or chat), with model and outcome.
    ("usage_monthly_endpoints", "month", ("model", "outcome", "endpoint")),
    ("usage_daily_endpoints", "day", ("model", "outcome", "endpoint")),
    ("usage_hourly_endpoints", "hour", ("model", "outcome", "endpoint")),
)
_DIMENSION_COLUMNS = {
    "model": lambda: [Column("model", Text, primary_key=True)],
    "key_id": lambda: [Column("key_id", String(32), primary_key=True)],
    "outcome": lambda: [Column("outcome", String(32), primary_key=True)],
    "user": lambda: [Column("has_user", Boolean, primary_key=True), Column("end_user", Text, primary_key=True)],
    "endpoint": lambda: [Column("endpoint", String(16), primary_key=True)],
}


def _rollup(name: str, dimensions: tuple[str, ...]) -> Table:
    return Table(
        name,
        metadata,
        Column("account_id", String(64), primary_key=True),
        Column("period", UTCDateTime, primary_key=True),  # the start of the hour, day or month
        *(column for dimension in dimensions for column in _DIMENSION_COLUMNS[dimension]()),
        *(Column(measure, BigInteger, nullable=False) for measure in ROLLUP_MEASURES),
        sqlite_with_rowid=False,  # the key is the table's order: a range of periods is read in one pass
    )


rollup_tables = {name: _rollup(name, dimensions) for name, _, dimensions in ROLLUPS}


# Every administrative change, by the CLI or over HTTP (gateway/admin.py): who, what, which
# object, when, from where. Never a secret: a key appears by its public id only.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("actor", Text, nullable=False),  # "key key_… (name)" or "cli (os user)"
    Column("actor_key_id", String(32), nullable=True),
    Column("address", Text, nullable=True),  # the client's address; null from the CLI
    Column("action", String(32), nullable=False),  # e.g. "key.create", "limits.set"
    Column("object_kind", String(16), nullable=False),  # "account", "key", "price"
    Column("object_id", Text, nullable=False),
    Column("detail", Text, nullable=False),  # JSON: what changed
)

# Prices set by an operator at run time (gateway/store/stored_prices.py), each row a price of a model
# from `since` on, in pico-dollars per token (USD per 1M tokens x 10^6, exact): added to the model's
# timeline of packaged or configured prices, so a row keeps the price in force when it started.
stored_prices = Table(
    "stored_prices",
    metadata,
    Column("model", Text, primary_key=True),
    Column("since", UTCDateTime, primary_key=True),
    Column("input_picos", BigInteger, nullable=False),
    Column("output_picos", BigInteger, nullable=False),
    Column("cached_input_picos", BigInteger, nullable=True),  # null: the input rate
)


# Stored responses (POST /v5/responses with `store`; gateway/store/responses.py): an account's
# inputs and outputs, kept for GATEWAY_RESPONSES_RETENTION_DAYS. The response object without its
# output, as JSON; its items, input and output, one row each, in their order. `bytes` is what the
# response's items and body hold together, so that a chain is bounded before it is read.
responses = Table(
    "responses",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("account_id", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("status", String(16), nullable=False),
    Column("previous_response_id", String(64), nullable=True),
    Column("bytes", BigInteger, nullable=False),
    Column("body", Text, nullable=False),
    Index(None, "account_id", "created_at"),
    Index(None, "created_at"),  # the purge reads the oldest first
)

response_items = Table(
    "response_items",
    metadata,
    Column("response_id", String(64), ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True),
    Column("kind", String(8), primary_key=True),  # "input" or "output"
    Column("position", Integer, primary_key=True),
    Column("item_id", String(128), nullable=False),
    Column("body", Text, nullable=False),
)
