"""Input no handler should meet, made harmless before it reaches one: NUL, which JSON and a URL
may carry and PostgreSQL text cannot hold, and JSON nested deeper than any request of ours."""

from __future__ import annotations

import re

from litestar.types import ASGIApp, Receive, Scope, Send

__all__ = ["MAX_JSON_DEPTH", "nested_too_deep", "nul_free_parameters", "storable"]

# Arrays and objects inside one another, at most: our deepest request (an MCP tools/call) is 4.
# A body nested 5,000 deep made the JSON decoders recurse until Python's limit (a 500).
MAX_JSON_DEPTH = 64
# A string runs to its closing quote or, unclosed, to the end: every quote then starts at most
# one match, so the scan is linear (a pattern that needed the closing quote rescanned to the end
# from each escaped quote of an unclosed string: 35 s of CPU for a 64 KiB body).
_STRING = re.compile(rb'"(?:[^"\\]|\\(?:.|\Z))*+(?:"|\Z)', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")
_NUL_ESCAPED = re.compile(rb"%00")
_REPLACEMENT_ESCAPED = b"%EF%BF%BD"  # U+FFFD in a URL


def storable(text: str) -> str:
    """`text` as PostgreSQL can store it: NUL becomes U+FFFD, as any undecodable input does (a
    search or a logged question holding one failed with a 500)."""
    return text.replace("\x00", "\ufffd")


def nested_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON `body` opens more than `limit` arrays or objects inside one another
    (brackets inside strings do not count), found without decoding it."""
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub(b'""', body)):
        depth += 1 if bracket.group() in (b"[", b"{") else -1
        if depth > limit:
            return True
    return False


def nul_free_parameters(app: ASGIApp) -> ASGIApp:
    """Every route's path and query parameters with NUL made storable before they are parsed,
    as the bodies' texts are (query_service/schemas.py): a NUL in /v1/entities?name= was a 500."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        # Litestar routes before its middleware runs: the path's parameters are parsed already,
        # the query's when a handler asks for them.
        path_params = scope.get("path_params") or {}
        query = scope.get("query_string", b"")
        if b"%00" in query or any("\x00" in v for v in path_params.values()
                                  if isinstance(v, str)):
            scope = {**scope,  # type: ignore[misc]
                     "path_params": {k: storable(v) if isinstance(v, str) else v
                                     for k, v in path_params.items()},
                     "query_string": _NUL_ESCAPED.sub(_REPLACEMENT_ESCAPED, query)}
        await app(scope, receive, send)

    return middleware
