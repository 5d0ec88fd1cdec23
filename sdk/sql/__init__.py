"""SQL that answers questions about a SQLite database, generated under a SELECT-only grammar.

    from sdk.sql import grammar_from_sqlite, run_query, sql_prompt, tables_from_sqlite

    tables = tables_from_sqlite("shop.db")
    grammar = grammar_from_sqlite("shop.db")          # or sql_grammar(tables)
    result = client.generate(grammar, prompt=sql_prompt("Who spent most?", tables))
    rows = run_query("shop.db", result.value)          # read-only, bounded

`sql_grammar` builds the grammar of a table schema (`Table`, `ForeignKey`; or
`tables_from_sqlite` / `grammar_from_sqlite` read it from a file): SELECT with joins along the
declared foreign keys, aggregates with `GROUP BY`/`HAVING`, `ORDER BY`, `LIMIT`, and no
sentence that writes, attaches, runs a PRAGMA or loads an extension, whatever the schema's
names are. Its check prepares each query in SQLite against the schema. `run_query` executes one
on a read-only connection whose functions are the grammar's own, within a time bound, a memory
bound, a row bound and a bound on the whole result's size.

**The grammar is not an authorization layer.** Masking `DROP` says nothing about which rows
(or which tables of the schema) this caller may read: give the grammar and `run_query` only
the tables the caller may see; row-level rules belong to the application.
"""

from sdk.sql._grammar import MAX_JOIN_PATHS
from sdk.sql._grammar import grammar_from_sqlite
from sdk.sql._grammar import prepares_in
from sdk.sql._grammar import sql_grammar
from sdk.sql._grammar import sql_prompt
from sdk.sql._run import ALLOWED_FUNCTIONS
from sdk.sql._run import DEFAULT_MAX_RESULT_BYTES
from sdk.sql._run import DEFAULT_TIMEOUT
from sdk.sql._run import QueryBounds
from sdk.sql._run import QueryTimeout
from sdk.sql._run import ResultTooLarge
from sdk.sql._run import bounded_statement
from sdk.sql._run import connect_read_only
from sdk.sql._run import run_query
from sdk.sql._run import tables_from_sqlite
from sdk.sql._schema import ColumnType
from sdk.sql._schema import ForeignKey
from sdk.sql._schema import Table
from sdk.sql._schema import affinity
from sdk.sql._schema import quote_identifier
from sdk.sql._schema import schema_ddl

__all__ = [
    "ALLOWED_FUNCTIONS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TIMEOUT",
    "MAX_JOIN_PATHS",
    "ColumnType",
    "ForeignKey",
    "QueryBounds",
    "QueryTimeout",
    "ResultTooLarge",
    "Table",
    "affinity",
    "bounded_statement",
    "connect_read_only",
    "grammar_from_sqlite",
    "prepares_in",
    "quote_identifier",
    "run_query",
    "schema_ddl",
    "sql_grammar",
    "sql_prompt",
    "tables_from_sqlite",
]
