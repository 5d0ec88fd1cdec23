"""The SQL reference grammar contract and the demo's database: a small shop.

The grammar, its check and `run_query` live in the SDK (`sdk.sql`); this module holds the
reference contract `SELECT_QUERY` over `DEMO_TABLES` (locked in `contracts/schemas/`), the demo
database, and re-exports `sdk.sql` for the code that imported it from here.

`SELECT_QUERY` v1 admitted single-table scans; v2 adds joins along the declared foreign key
(`orders.customer_id` -> `customers.id`), aggregates with `GROUP BY`/`HAVING`, and keywords in
lower case: a wider language, so every v1 query is still a sentence (`sdk schema diff
--against-lock contracts SelectQuery` says `grammar-widened`, compatible).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from sdk.sql import ColumnType
from sdk.sql import ForeignKey
from sdk.sql import Table
from sdk.sql import affinity
from sdk.sql import connect_read_only
from sdk.sql import prepares_in
from sdk.sql import quote_identifier
from sdk.sql import run_query
from sdk.sql import schema_ddl
from sdk.sql import sql_grammar
from sdk.sql import sql_prompt
from sdk.sql import tables_from_sqlite

__all__ = [
    "DEMO_TABLES",
    "SELECT_QUERY",
    "ColumnType",
    "ForeignKey",
    "Table",
    "affinity",
    "connect_read_only",
    "create_demo_database",
    "prepares_in",
    "quote_identifier",
    "run_query",
    "schema_ddl",
    "sql_grammar",
    "sql_prompt",
    "tables_from_sqlite",
]

DEMO_TABLES: tuple[Table, ...] = (
    Table("customers", {"id": "integer", "name": "text", "country": "text"}),
    Table(
        "orders",
        {
            "id": "integer",
            "customer_id": "integer",
            "total": "real",
            "status": "text",
            "placed_on": "text",
        },
        foreign_keys=(ForeignKey("customer_id", "customers", "id"),),
    ),
)
"""A small shop: the schema of `create_demo_database` and of `SELECT_QUERY`."""

SELECT_QUERY = sql_grammar(DEMO_TABLES, name="SelectQuery", version=2)
"""The reference grammar contract, over `DEMO_TABLES` (locked in `contracts/schemas/`)."""

_DEMO_ROWS: dict[str, list[tuple[Any, ...]]] = {
    "customers": [(1, "Ada", "UK"), (2, "Grace", "US"), (3, "Linus", "FI"), (4, "Margaret", "US")],
    "orders": [
        (1, 1, 120.5, "shipped", "2026-01-04"),
        (2, 2, 35.0, "pending", "2026-01-09"),
        (3, 2, 410.25, "shipped", "2026-02-11"),
        (4, 3, 15.75, "cancelled", "2026-02-14"),
        (5, 4, 980.0, "shipped", "2026-03-01"),
    ],
}


def create_demo_database(path: str | Path) -> Path:
    """Write the demo's small shop database to `path` (replacing it) and return the path."""
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.unlink(missing_ok=True)
    with closing(sqlite3.connect(temporary)) as database:
        for statement in schema_ddl(DEMO_TABLES):
            database.execute(statement)
        for table in DEMO_TABLES:
            marks = ", ".join("?" * len(table.columns))
            database.executemany(
                f"INSERT INTO {quote_identifier(table.name)} VALUES ({marks})",
                _DEMO_ROWS[table.name],
            )
        database.commit()
    temporary.replace(target)  # atomic: a reader never sees half a database
    return target
