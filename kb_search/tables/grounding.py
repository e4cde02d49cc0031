"""A table answer inside the ask pipeline: the tables of the documents a search found, read for
the caller's groups; the passages holding the rows it rests on, added where the search did not
offer them; its text with their [n]; and its check, which recomputes what it computed from the
rows it cites and finds each of those rows in its passage."""

from __future__ import annotations

import re

import psycopg

from kb_search.search import SearchHit
from kb_search.tables.cell_answers import CitedCell, TableAnswer, recount
from kb_search.tables.choice import FoundPassage, choose_answer
from kb_search.tables.reading import normalized
from kb_search.tables.stored import documents_naming_tables, tables_of_documents

__all__ = ["cells_in", "check_table_answer", "read_tables", "table_text", "unread_passages"]

# Documents the table leg adds, at most, whose tables name a column of the question: a table
# the search did not rank among the first five passages (a count of a list's rows asks no word
# of its rows) is read too.
TABLE_LEG_DOCUMENTS = 10


def read_tables(conn: psycopg.Connection, question: str, hits: list[SearchHit],
                groups: list[str], expansions: list[str]) -> TableAnswer | None:
    """What the tables of the documents of `hits`, and of those whose tables name a column of
    the question, answer (or say is missing), read for `groups`; None when no table bears on
    the question."""
    found = [h.document_id for h in hits if h.document_id is not None]
    named = documents_naming_tables(conn, normalized(question), groups, TABLE_LEG_DOCUMENTS)
    tables = tables_of_documents(conn, list(dict.fromkeys([*found, *named])), groups)
    if not tables:
        return None
    ranks = {h.chunk_id: rank for rank, h in enumerate(hits)}
    return choose_answer(question, tables, ranks, expansions,
                         [FoundPassage(h.title, f"{h.heading} {h.content}") for h in hits])


def unread_passages(answer: TableAnswer, offered: set[int]) -> list[int]:
    """The chunk ids of the passages holding the answer's rows that were not offered."""
    wanted = [r.chunk_id for s in answer.sentences for r in s.rows]
    return [c for c in dict.fromkeys(wanted) if c not in offered]


def table_text(answer: TableAnswer, numbers: dict[int, int]) -> str:
    """The answer's sentences, each followed by the [n] of the passages holding its rows
    (`numbers`: a chunk id's passage number), one sentence to a line."""
    lines = []
    for sentence in answer.sentences:
        cited = dict.fromkeys(numbers[r.chunk_id] for r in sentence.rows)
        lines.append(sentence.text + "".join(f"[{n}]" for n in cited))
    return "\n".join(lines)


def cells_in(answer: TableAnswer, chunk_id: int) -> list[CitedCell]:
    """The cells the answer states that the passage `chunk_id` holds."""
    rows = {r.row_no: r.chunk_id for s in answer.sentences for r in s.rows}
    return [c for s in answer.sentences for c in s.cells if rows.get(c.row) == chunk_id]


def check_table_answer(answer: TableAnswer, contents: dict[int, str],
                       warnings: list[str]) -> list[str]:
    """The verification's warnings for a table answer: those of its computed values (which no
    passage writes) dropped once recomputing them from the cited rows gives them again, and a
    warning for each row that its cited passage (`contents`, by chunk id) does not hold."""
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
