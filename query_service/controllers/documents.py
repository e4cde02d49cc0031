"""Opening a cited source over HTTP: a document's metadata and a passage with its neighbours,
and, where the operator allows it (KB_DOCUMENT_DOWNLOADS), the original file. Filtered by the
caller's groups in SQL like search; outside them a document is a 404, exactly as one that does
not exist."""

from __future__ import annotations

import urllib.parse
from typing import Annotated, TypeVar

import anyio
import msgspec
from litestar import Controller, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import NotFoundException
from litestar.params import Parameter
from litestar.response import Stream

from kb_core.callers import Caller
from kb_search import DocumentView, Original, Sources
from query_service.dependencies import provide_caller, provide_sources
from query_service.errors import ERROR_RESPONSES, error_response, refuse_unknown_query
from query_service.guards import requires_caller
from query_service.schemas import BEARER, MAX_ID, Id

__all__ = ["DocumentsController"]

T = TypeVar("T")

# An absent query parameter, not a null one: Litestar's default `oneOf: [integer, null]` lets a
# client (and schemathesis) think `?chunk_id=null` is a value.
OPTIONAL_INTEGER = {"oneOf": None, "type": "integer"}

# An original is never rendered by the browser: an HTML or SVG file served from this origin
# could run script with the employee's session.
ATTACHMENT_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, no-store",
}

RESPONSES = ERROR_RESPONSES | {
    404: error_response("No such document or passage among those the caller may read"),
}


class DocumentsController(Controller):
    path = "/v1/documents"
    tags = ["documents"]
    guards = [requires_caller]
    dependencies = {"caller": Provide(provide_caller, sync_to_thread=False),
                    "sources": Provide(provide_sources, sync_to_thread=False)}
    security = [{BEARER: []}]

    @get("/{document_id:int}", operation_id="document", responses=RESPONSES,
         before_request=refuse_unknown_query)
    async def document(self, document_id: Id, caller: Caller, sources: Sources, state: State,
                       chunk_id: Annotated[int | None, Parameter(
                           ge=1, le=MAX_ID, schema_extra=OPTIONAL_INTEGER)] = None
                       ) -> DocumentView:
        """A document the caller may read; with `chunk_id`, that passage and its neighbours."""
        view = _found(await anyio.to_thread.run_sync(sources.document, caller, document_id,
                                                      chunk_id))
        if state.document_downloads:
            view = msgspec.structs.replace(view,
                                           original_url=f"/v1/documents/{document_id}/original")
        return view

    @get("/{document_id:int}/original", operation_id="document_original",
         before_request=refuse_unknown_query,
         responses=RESPONSES | {409: error_response("The file has changed since it was indexed")},
         media_type="application/octet-stream")
    async def original(self, document_id: Id, caller: Caller, sources: Sources,
                       state: State) -> Stream:
        """The original file, as an attachment, where the operator allows downloads."""
        if not state.document_downloads:
            raise NotFoundException("downloading originals is turned off")
        # No database connection is held while the file is read (Sources.original).
        return _download(_found(await anyio.to_thread.run_sync(sources.original, caller,
                                                               document_id)))


def _found(found: T | None) -> T:
    if found is None:
        raise NotFoundException("no such document")
    return found


def _download(original: Original) -> Stream:
    """The copy's bytes as an attachment; the copy is closed at the end, or when a client that
    went away drops the stream."""
    return Stream(original.pieces(), media_type="application/octet-stream",
                  headers={**ATTACHMENT_HEADERS, "Content-Length": str(original.size_bytes),
                           "Content-Disposition": _attachment(original.filename)})


def _attachment(filename: str) -> str:
    # RFC 6266 / 5987: an ASCII fallback and the UTF-8 name (日本語のファイル名). The fallback
    # is a quoted string: no quote, backslash or control character may end or break it.
    fallback = "".join("_" if c in '"\\' or not c.isprintable() else c
                       for c in filename.encode("ascii", "replace").decode()) or "document"
    return f'attachment; filename="{fallback}"; filename*=UTF-8\'\'{urllib.parse.quote(filename)}'
