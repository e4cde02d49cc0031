"""Questions a table answers: the tables of the documents a search found, read as cells
(kb_search/tables/stored.py), the question read against each (reading.py), the table that
accounts for it chosen (choice.py) and its answer stated or computed (cell_answers.py)."""

from kb_search.tables.cell_answers import CitedCell, TableAnswer, TableSentence, recount
from kb_search.tables.choice import choose_answer
from kb_search.tables.stored import StoredRow, StoredTable, tables_of_documents

__all__ = [
    "CitedCell",
    "StoredRow",
    "StoredTable",
    "TableAnswer",
    "TableSentence",
    "choose_answer",
    "recount",
    "tables_of_documents",
]
