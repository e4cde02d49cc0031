"""Entity cards: what the caller's passages say of one entity (a code, a 規程, a department),
where it is named, document by document, and what it is named with, with the passages as
evidence. Everything comes from passages the caller may read (sql/queries/entities.sql): an
entity only a secret document names does not exist for anyone outside its groups."""

from __future__ import annotations

import msgspec
import psycopg

from kb_core.callers import Caller
from kb_core.entities import entities_of, entity_key
from kb_core.queries import query
from kb_core.read_routing import ReadRouter
from kb_search.passage_reference import PassageRef, ReadByOcr

__all__ = [
    "Entities",
    "EntityCard",
    "EntityDocument",
    "EntityLink",
    "EntityMatch",
    "EntityPassage",
    "EntityRelation",
    "RelationEvidence",
    "entities_in",
    "entity_card",
    "find_entities",
]

MATCHES = 20  # entities a name lookup lists
MENTIONS = 200  # passages a card lists
RELATIONS = 30  # related entities a card lists
EVIDENCE = 3  # passages shown for each relation


class EntityMatch(msgspec.Struct):
    id: str  # the normalised name: GET /v1/entities/{id}
    kind: str  # code, document, article, unit, role; thing (KB_GRAPH_LLM)
    name: str  # as the passages write it most often
    passages: int
    documents: int


class EntityPassage(msgspec.Struct):
    """A passage naming the entity, listed under its document."""

    chunk_id: int
    heading: str
    page: str | None
    ocr: ReadByOcr
    written: str  # how this passage writes the entity's name
    description: str | None = None  # what it says of the entity (KB_GRAPH_LLM); None: rules


class EntityDocument(msgspec.Struct):
    document_id: int
    source_uri: str
    path: str
    title: str
    passages: list[EntityPassage]


class RelationEvidence(PassageRef):
    """A passage naming both entities of a relation."""

    document_id: int  # a document's passage: learned facts name no entities


class EntityRelation(msgspec.Struct):
    id: str
    kind: str
    name: str
    passages: int  # the caller's passages naming both
    references: list[str]  # how those passages refer between the two: reference, row, llm
    evidence: list[RelationEvidence]
    descriptions: list[str] = []  # what those passages say of the relation (KB_GRAPH_LLM)


class EntityCard(msgspec.Struct):
    id: str
    kind: str
    name: str
    passages: int
    documents: list[EntityDocument]
    relations: list[EntityRelation]


class EntityLink(msgspec.Struct):
    """An entity an answer names, which the caller's passages name too: a link to its card."""

    id: str
    name: str  # as the answer writes it


def find_entities(conn: psycopg.Connection, name: str, groups: list[str],
                  limit: int = MATCHES) -> list[EntityMatch]:
    """Entities whose normalised name is `name`'s, then those it begins."""
    key = entity_key(name)
    if not key:
        return []
    prefix = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = conn.execute(query("entities_named"), {
        "key": key, "prefix": prefix, "groups": groups, "limit": limit})
    return [EntityMatch(*row) for row in rows]


def entity_card(conn: psycopg.Connection, entity_id: str,
                groups: list[str]) -> EntityCard | None:
    """The card of entity `entity_id` (its normalised name, or any way of writing it), or None
    when no passage the caller may read names it."""
    entity_id = entity_key(entity_id)
    rows = conn.execute(query("entity_mentions"),
                        {"key": entity_id, "groups": groups, "limit": MENTIONS}).fetchall()
    if not rows:
        return None
    documents: dict[int, EntityDocument] = {}
    for document_id, uri, path, title, chunk_id, heading, page, ocr, _, written, said in rows:
        document = documents.setdefault(
            document_id, EntityDocument(document_id, uri, path, title, []))
        document.passages.append(EntityPassage(chunk_id, heading, page, ocr, written, said))
    # Its name and count as a lookup gives them: the exact match comes first, and exists.
    match = find_entities(conn, entity_id, groups, 1)[0]
    related = conn.execute(query("entity_relations"), {
        "key": entity_id, "groups": groups, "limit": RELATIONS, "evidence": EVIDENCE}).fetchall()
    evidence = conn.execute(query("entity_evidence"), {
        "ids": [i for *_, ids, _ in related for i in ids], "groups": groups})
    shown = {chunk_id: RelationEvidence(
        chunk_id=chunk_id, document_id=document_id, path=path, title=title, heading=heading,
        page=page, ocr=ocr) for chunk_id, document_id, path, title, heading, page, ocr in evidence}
    relations = [EntityRelation(key, kind_, name_, passages, references,
                                [shown[i] for i in ids if i in shown], said)
                 for key, kind_, name_, passages, references, ids, said in related]
    return EntityCard(entity_id, match.kind, match.name, match.passages,
                      list(documents.values()), relations)


def entities_in(conn: psycopg.Connection, text: str, groups: list[str]) -> list[EntityLink]:
    """The entities `text` names that the caller's passages name too, in order; not roles
    (部長, 課長), which name a position in every department, not one thing."""
    found = [e for e in entities_of(text) if e.kind != "role"]
    if not found:
        return []
    known = {key for (key,) in conn.execute(
        query("entities_known"), {"keys": [e.key for e in found], "groups": groups})}
    return [EntityLink(e.key, e.name) for e in found if e.key in known]


class Entities:
    """The entities the caller's passages name (docs/knowledge-graph.md), read where the read
    router sends it."""

    def __init__(self, reads: ReadRouter) -> None:
        self._reads = reads

    def find(self, caller: Caller, name: str) -> list[EntityMatch]:
        """Entities the caller's passages name whose normalised name is `name`'s (first), or
        begins with it."""
        return self._reads.run(lambda conn: find_entities(conn, name, list(caller.groups)))

    def card(self, caller: Caller, entity_id: str) -> EntityCard | None:
        """The card of an entity: where the caller's passages name it, by document, and what
        they name it with; None as for an entity that does not exist."""
        return self._reads.run(lambda conn: entity_card(conn, entity_id, list(caller.groups)))
