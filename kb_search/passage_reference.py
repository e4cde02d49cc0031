"""A reference to a passage: which chunk of which document, where in it, and how its text was
read. Hits, citations, the passages offered to an answerer and given to it, entity evidence and
the MCP results each extend this one struct with what they add, and are made from one another by
`reference`; `named_by_path` makes the one public form of a document's name."""

from __future__ import annotations

from typing import Annotated, Any, Protocol, TypeVar

import msgspec

__all__ = ["PassageRef", "ReadByOcr", "named_by_path", "reference"]

# Whether a passage's page was read from a scan (sql/018_ocr.sql), stated in both languages: the
# contract (OpenAPI) says it to app developers, the MCP output schemas to assistants.
ReadByOcr = Annotated[bool, msgspec.Meta(description=(
    "スキャンから文字認識（OCR）したページの箇所なら true。誤認識を含むことがあります / true "
    "when the passage's page was read from a scan by OCR (character recognition): its text may "
    "hold misread characters; false for a document's own text and a learned fact"))]


class PassageRef(msgspec.Struct, kw_only=True):
    """A passage as every result names it. Keyword-only, so that a struct extending it lists
    its own fields first (a hit's `rank`, a citation's `n`)."""

    chunk_id: int
    # Where GET /v1/documents/{id} opens it; None for a learned fact, which has no document.
    document_id: int | None
    path: str  # the document's path under its folder: the name it is shown and cited by
    title: str
    heading: str
    page: str | None
    ocr: ReadByOcr
    # An approved correction (kb_search/corrections.py), cited as 利用者による訂正: its heading
    # names the reviewer and the date.
    learned_fact: bool = False


def reference(ref: PassageRef) -> dict[str, Any]:
    """`ref`'s reference fields, to make another kind of reference to the same passage:
    `Citation(n=1, ..., **reference(hit))`."""
    return {name: getattr(ref, name) for name in PassageRef.__struct_fields__}


class _Sourced(Protocol):
    source_uri: str
    path: str


Sourced = TypeVar("Sourced", bound=_Sourced)


def named_by_path(item: Sourced) -> Sourced:
    """`item` with its document named by its path, never by the server's file path: the form
    in which a document's name leaves the installation (HTTP, MCP)."""
    return msgspec.structs.replace(item, source_uri=item.path)
