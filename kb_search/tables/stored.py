"""The tables of the documents a search found, as the caller may read them: the cells kept by
the pipeline (sql/026_tables.sql), each row with the passage that holds its text."""

from __future__ import annotations

import msgspec
import psycopg

from kb_core.queries import query

__all__ = ["StoredRow", "StoredTable", "documents_naming_tables", "tables_of_documents"]


class StoredRow(msgspec.Struct, frozen=True):
    """A data row: its number in its table, the passage holding it, its cells as shown."""

    row_no: int
    chunk_id: int
    cells: list[str]


class StoredTable(msgspec.Struct, frozen=True):
    """A table of a document, with the rows the caller may read."""

    document_id: int
    table_no: int
    title: str  # the document's
    path: str
    location: str | None
    caption: str
    columns: list[str]
    units: list[str | None]
    notes: list[str]
    rows: list[StoredRow]

    @property
    def name(self) -> str:
        """What an answer calls the table, short: its sheet, else its caption's first line
        where that is short, else its document's title."""
        if (self.location or "").startswith("シート: "):
            return self.location.removeprefix("シート: ").strip()
        first = self.caption.splitlines()[0].strip() if self.caption else ""
        return first if 0 < len(first) <= 20 else self.title


def documents_naming_tables(conn: psycopg.Connection, question: str, groups: list[str],
                            limit: int) -> list[int]:
    """Up to `limit` documents whose tables, readable by `groups`, have a column that
    `question` (normalized: NFKC, lower case, no white space) names."""
    rows = conn.execute(query("documents_naming_tables"),
                        {"question": question, "groups": groups, "limit": limit}).fetchall()
    return [document_id for (document_id,) in rows]


def tables_of_documents(conn: psycopg.Connection, documents: list[int],
                        groups: list[str]) -> list[StoredTable]:
    """The tables of `documents` with their rows readable by `groups`, in reading order."""
    if not documents:
        return []
    rows = conn.execute(query("tables_of_documents"),
                        {"documents": documents, "groups": groups}).fetchall()
    return [
        StoredTable(document_id=document_id, table_no=table_no, title=title, path=path,
                    location=location, caption=caption, columns=columns, units=units,
                    notes=notes, rows=[StoredRow(n, c, cells) for n, c, cells in
                                       zip(row_nos, chunk_ids, cells_of, strict=True)])
        for (document_id, table_no, title, path, location, caption, columns, units, notes,
             row_nos, chunk_ids, cells_of) in rows
    ]
