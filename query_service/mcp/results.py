"""What the MCP tools take and return: msgspec structs, whose JSON Schemas are the tools' input
and output schemas, built from the engine's results with documents named by path (`public`)
and every piece of document text fenced as quoted data (`quoted_passage`)."""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import msgspec

from kb_search import (
    NOT_FOUND,
    AskResult,
    DocumentView,
    EntityCard,
    EntityMatch,
    PassageRef,
    ReadByOcr,
    SearchResult,
    public,
    quoted_passage,
    reference,
)

__all__ = [
    "Answer",
    "AskArguments",
    "DocumentArguments",
    "DocumentPassages",
    "EntityArguments",
    "EntityFound",
    "FeedbackArguments",
    "FeedbackReceipt",
    "FoundPassage",
    "NeighbourPassage",
    "NumberedCitation",
    "SearchArguments",
    "SearchPassages",
    "answer_of",
    "document_passages_of",
    "entity_found",
    "object_schema",
    "passage_uri",
    "passages_of",
]

# As /v1 states it (query_service/schemas.py, Text), restated so that `kb mcp` loads no
# Litestar: something other than white space and control characters; the configurable length
# limit is checked when the tool runs.
Text = Annotated[str, msgspec.Meta(min_length=1, pattern=r"[^\s\x00-\x1f\x7f-\x9f\ufeff]")]
Id = Annotated[int, msgspec.Meta(ge=1)]


_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class SearchArguments(msgspec.Struct, forbid_unknown_fields=True):
    query: Annotated[Text, msgspec.Meta(description="検索語や質問 / search terms or a question")]
    k: Annotated[int, msgspec.Meta(ge=1, le=50, description="返す箇所の数 / passages "
                                                            "returned")] = 10
    mode: Annotated[Literal["hybrid", "vector", "keyword", "graph"], msgspec.Meta(
        description="hybrid（既定）、vector（意味）、keyword（語句）、graph（関連する固有名） / "
                    "hybrid (default), vector (meaning), keyword (terms) or graph (named "
                    "things and what they are named with)")] = "hybrid"


class AskArguments(msgspec.Struct, forbid_unknown_fields=True):
    question: Annotated[Text, msgspec.Meta(description="質問 / the question")]
    mode: Annotated[Literal["auto", "flash", "deep"], msgspec.Meta(
        description="auto: 複数のことを尋ねる質問は部分ごとに答える / part by part when the "
                    "question asks several things; flash: 一つの質問として / as one question; "
                    "deep: 部分があれば常に部分ごとに / part by part whenever it has parts"
    )] = "auto"
    follows: Annotated[str, msgspec.Meta(
        pattern=_UUID,
        description="続きの質問なら、直前の ask の結果の query_id / for a follow-up question, "
                    "the query_id of the ask it follows")] | None = None


class DocumentArguments(msgspec.Struct, forbid_unknown_fields=True):
    document_id: Annotated[Id, msgspec.Meta(
        description="search・ask の結果の document_id / a search hit's or citation's")]
    chunk_id: Annotated[Id, msgspec.Meta(
        description="search・ask の結果の chunk_id / a search hit's or citation's")]


class EntityArguments(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[Text, msgspec.Meta(max_length=200, description=(
        "型番・文書名・部署名など（ZP-2041、経費精算規程、品質保証部） / a code, a "
        "document's or a department's name (ZP-2041, 経費精算規程, 品質保証部)"))]


class FeedbackArguments(msgspec.Struct, forbid_unknown_fields=True):
    query_id: Annotated[str, msgspec.Meta(
        pattern=_UUID,
        description="ask の結果の query_id / the query_id ask returned")]
    helpful: Annotated[bool, msgspec.Meta(description="役に立ったか / whether it helped")]
    comment: Annotated[str, msgspec.Meta(max_length=4000)] | None = None


class FoundPassage(PassageRef):
    """A passage found, with what cites it and its text as a quoted <document> block."""

    rank: int
    uri: str | None  # the passage resource: kb://documents/{document_id}/passages/{chunk_id}
    passage: str


class SearchPassages(msgspec.Struct):
    """The passages the caller may read, best first; `message` is the not-found sentence when
    there are none."""

    query: str
    passages: list[FoundPassage]
    message: str | None


class NumberedCitation(PassageRef):
    """The source of the answer's [n], with the text it used as a quoted <document> block."""

    n: int
    quote: str


class Answer(msgspec.Struct):
    """A grounded answer; `answer` is the not-found sentence itself when `found` is false."""

    query_id: str
    answer: str
    found: bool
    verified: bool
    citations: list[NumberedCitation]
    asked_as: str  # the question as searched: a follow-up read with its conversation's topic


class NeighbourPassage(msgspec.Struct):
    chunk_id: int
    heading: str
    page: str | None
    ocr: ReadByOcr
    cited: bool  # the passage asked for, not one of its neighbours
    passage: str


class DocumentPassages(msgspec.Struct):
    """A passage of a document and its neighbours, in document order."""

    document_id: int
    path: str
    title: str
    revision_date: datetime.date | None
    passages: list[NeighbourPassage]


class FeedbackReceipt(msgspec.Struct):
    ok: bool


class NamedEntity(msgspec.Struct):
    """An entity as the caller's passages name it: `id` is its normalised name."""

    id: str
    kind: str  # code, document, article, unit, role; thing (the LLM extractor's)
    name: str
    passages: int  # the caller's passages naming it


class Mention(PassageRef):
    """A passage of the caller's that names the entity (read it with get_document or `uri`)."""

    document_id: int  # a document's passage: learned facts name no entities
    uri: str | None


class Neighbour(msgspec.Struct):
    """An entity named with it: `passages` of the caller's name both; `references`, how they
    refer from one to the other (reference: 「〜による」, row: one table row, llm)."""

    id: str
    kind: str
    name: str
    passages: int
    references: list[str]
    evidence: list[Mention]


class EntityFound(msgspec.Struct):
    """The entities the name is or begins (`matches`), and the first one's passages and
    neighbours (`entity`); `message` is the not-found sentence when there is none."""

    matches: list[NamedEntity]
    entity: NamedEntity | None
    mentions: list[Mention]
    neighbours: list[Neighbour]
    message: str | None


def object_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema of `struct` as an object at the top, as MCP's tool schemas must be, with
    the structs it holds under $defs."""
    _, components = msgspec.json.schema_components([struct], ref_template="#/$defs/{name}")
    schema = components.pop(struct.__name__)
    return {**schema, "$defs": components} if components else schema


def passage_uri(document_id: int | None, chunk_id: int) -> str | None:
    return None if document_id is None else f"kb://documents/{document_id}/passages/{chunk_id}"


def passages_of(result: SearchResult) -> SearchPassages:
    hits = public(result).hits
    return SearchPassages(
        query=result.query,
        passages=[FoundPassage(
            rank=h.rank, uri=passage_uri(h.document_id, h.chunk_id),
            passage=quoted_passage(h.rank, h, h.content), **reference(h)) for h in hits],
        message=None if hits else NOT_FOUND)


def answer_of(result: AskResult) -> Answer:
    result = public(result)
    return Answer(
        query_id=result.query_id, answer=result.answer, found=result.found,
        verified=result.verified,
        citations=[NumberedCitation(n=c.n, quote=quoted_passage(c.n, c, c.quote), **reference(c))
                   for c in result.citations],
        asked_as=result.asked_as)


def document_passages_of(view: DocumentView) -> DocumentPassages:
    return DocumentPassages(
        document_id=view.id, path=view.path, title=view.title,
        revision_date=view.revision_date,
        passages=[NeighbourPassage(
            chunk_id=p.chunk_id, heading=p.heading, page=p.page, ocr=p.ocr, cited=p.cited,
            # Fenced as the face fences hits: the face quotes only hits, so each neighbour is
            # dressed as hit number n.
            passage=quoted_passage(n, PassageRef(
                chunk_id=p.chunk_id, document_id=view.id, path=view.path, title=view.title,
                heading=p.heading, page=p.page, ocr=p.ocr), p.content))
            for n, p in enumerate(view.passages, start=1)])


def entity_found(matches: list[EntityMatch], card: EntityCard | None) -> EntityFound:
    """Names and places only: no document text, so nothing to fence (what the LLM extractor
    says of an entity stays on the card of the HTTP door)."""
    named = [NamedEntity(m.id, m.kind, m.name, m.passages) for m in matches]
    if card is None:
        return EntityFound(named, None, [], [], NOT_FOUND)
    return EntityFound(
        matches=named,
        entity=NamedEntity(card.id, card.kind, card.name, card.passages),
        mentions=[Mention(
            chunk_id=p.chunk_id, document_id=d.document_id, path=d.path, title=d.title,
            heading=p.heading, page=p.page, ocr=p.ocr, uri=passage_uri(d.document_id, p.chunk_id))
            for d in card.documents for p in d.passages],
        neighbours=[Neighbour(
            id=r.id, kind=r.kind, name=r.name, passages=r.passages, references=r.references,
            evidence=[Mention(uri=passage_uri(e.document_id, e.chunk_id), **reference(e))
                      for e in r.evidence])
            for r in card.relations],
        message=None)

