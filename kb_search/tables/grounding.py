"""A table answer inside the ask pipeline: the tables of the documents a search found, read for
the caller's groups; the tables an LLM's tools may compute from; the passages holding the rows
an answer rests on, added where the search did not offer them; its text with their [n]; and its
check, which recomputes what it computed from the rows it cites and finds each of those rows in
its passage."""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg

from kb_search.search import SearchHit
from kb_search.tables.cell_answers import CitedCell, TableAnswer, recount
from kb_search.tables.choice import FoundPassage, choose_answer
from kb_search.tables.reading import normalized
from kb_search.tables.stored import (
    StoredRow,
    StoredTable,
    documents_naming_tables,
    tables_of_documents,
)

__all__ = ["TableReading", "cells_in", "check_table_answers", "read_tables", "table_text",
           "tool_tables", "unread_passages", "used_results"]

# Documents the table leg adds, at most, whose tables name a column of the question: a table
# the search did not rank among the first five passages (a count of a list's rows asks no word
# of its rows) is read too.
TABLE_LEG_DOCUMENTS = 10
# What an LLM's tools may compute from, at most: tables, and passages holding their rows beyond
# those the search offered (each is offered for citation, not shown in the prompt).
TOOL_TABLES = 6
TOOL_PASSAGES = 12


@dataclass
class TableReading:
    """The tables that bear on a question, as the caller may read them, and what they answer
    (or say is missing; None: no table answers, the passages' text is left to)."""

    tables: list[StoredTable]
    answer: TableAnswer | None


def read_tables(conn: psycopg.Connection, question: str, hits: list[SearchHit],
                groups: list[str], expansions: list[str]) -> TableReading:
    """The tables of the documents of `hits`, and of those whose tables name a column of the
    question, read for `groups`, and what they answer."""
    found = [h.document_id for h in hits if h.document_id is not None]
    named = documents_naming_tables(conn, normalized(question), groups, TABLE_LEG_DOCUMENTS)
    tables = tables_of_documents(conn, list(dict.fromkeys([*found, *named])), groups)
    if not tables:
        return TableReading([], None)
    ranks = {h.chunk_id: rank for rank, h in enumerate(hits)}
    return TableReading(tables, choose_answer(
        question, tables, ranks, expansions,
        [FoundPassage(h.title, f"{h.heading} {h.content}") for h in hits]))


def tool_tables(reading: TableReading, hits: list[SearchHit]) -> list[StoredTable]:
    """The tables an LLM's tools may compute from: the one that answers first, then those
    whose rows the search found, by rank, then the table leg's; as many as TOOL_TABLES and
    TOOL_PASSAGES allow."""
    ranks = {h.chunk_id: rank for rank, h in enumerate(hits)}
    chosen = reading.answer.question.table if reading.answer and reading.answer.question else None

    def order(table: StoredTable) -> tuple[bool, int]:
        return (table is not chosen,
                min((ranks[r.chunk_id] for r in table.rows if r.chunk_id in ranks), default=1000))

    kept, unread = [], set()
    for table in sorted(reading.tables, key=order):
        more = {r.chunk_id for r in table.rows if r.chunk_id not in ranks} - unread
        if len(kept) == TOOL_TABLES or len(unread | more) > TOOL_PASSAGES:
            continue
        kept.append(table)
        unread |= more
    return kept


def unread_passages(rows: list[StoredRow], offered: set[int]) -> list[int]:
    """The chunk ids of the passages holding `rows` that were not offered."""
    return [c for c in dict.fromkeys(r.chunk_id for r in rows) if c not in offered]


def table_text(answer: TableAnswer, numbers: dict[int, int]) -> str:
    """The answer's sentences, each followed by the [n] of the passages holding its rows
    (`numbers`: a chunk id's passage number), one sentence to a line."""
    lines = []
    for sentence in answer.sentences:
        cited = dict.fromkeys(numbers[r.chunk_id] for r in sentence.rows)
        lines.append(sentence.text + "".join(f"[{n}]" for n in cited))
    return "\n".join(lines)


def cells_in(answers: list[TableAnswer], chunk_id: int) -> list[CitedCell]:
    """The cells the answers state that the passage `chunk_id` holds."""
    cells = []
    for answer in answers:
        rows = {r.row_no: r.chunk_id for s in answer.sentences for r in s.rows}
        cells += [c for s in answer.sentences for c in s.cells if rows.get(c.row) == chunk_id]
    return list(dict.fromkeys(cells))


def used_results(results: list[TableAnswer], cited: set[int]) -> list[TableAnswer]:
    """The results of an LLM's tool calls that its answer rests on: those whose rows are held
    by passages it cites (a call it made and left unused says nothing)."""
    return [r for r in results
            if all(row.chunk_id in cited for s in r.sentences for row in s.rows)]


def check_table_answers(answers: list[TableAnswer], contents: dict[int, str],
                        warnings: list[str]) -> list[str]:
    """The verification's warnings for an answer from tables: those of the computed values
    (which no passage writes) dropped once recomputing them from the cited rows gives them
    again, and a warning for each row that its cited passage (`contents`, by chunk id) does not
    hold."""
    for answer in answers:
        warnings = _checked(answer, contents, warnings)
    return warnings


def _checked(answer: TableAnswer, contents: dict[int, str], warnings: list[str]) -> list[str]:
    recomputed = {str(v) for v in recount(answer)}
    confirmed = [v for v in answer.computed if v in recomputed]
    # The bounds the question gave (「76.9kg以上」) are repeated, not taken from a passage.
    given = [n for text in answer.given for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]
    kept = [w for w in warnings
            if not any(w.startswith(f"number {v} does not appear") for v in [*confirmed, *given])]
    kept += [f"computed value {v} does not follow from the cited rows"
             for v in answer.computed if v not in recomputed]
    for row in (r for s in answer.sentences for r in s.rows):
        text = normalized(contents.get(row.chunk_id, ""))
        if not all(normalized(cell) in text for cell in row.cells if cell):
            kept.append(f"table row {row.row_no} is not in its cited passage")
    return list(dict.fromkeys(kept))
