"""The service's domain errors and the one place that turns every error, its own or the
engine's, into the JSON body `{"error": "<code>", "detail": "..."}` with its HTTP status
(docs/http-api.md), never a stack trace; and how OpenAPI documents those bodies."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
import psycopg
import psycopg_pool
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi.datastructures import ResponseSpec

from kb_core.embeddings import UnknownEmbedderError
from kb_search import (
    ChangedOriginalError,
    CorrectionError,
    UnknownCorrectionError,
    UnknownQueryError,
)

__all__ = [
    "ERROR_RESPONSES",
    "EXCEPTION_HANDLERS",
    "DatabaseHealth",
    "ErrorBody",
    "QuestionTooLongError",
    "RateLimitedError",
    "ServiceError",
    "error_response",
    "json_not_found",
    "refuse_unknown_query",
]

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """A refusal the caller can act on."""

    status_code = 400
    code = "invalid_request"

    def __init__(self, detail: str, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code:
            self.code = code


async def refuse_unknown_query(request: Request) -> None:
    """A `before_request` of GET operations: a query parameter the operation does not take is
    refused, not ignored (a misspelt `chunk_id` would silently show the whole document)."""
    known = request.route_handler.parsed_fn_signature.parameters
    unknown = sorted(set(request.query_params) - set(known))
    if unknown:
        raise ServiceError(f"unknown query parameter {unknown[0]!r}")


class RateLimitedError(ServiceError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many requests; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class QuestionTooLongError(ServiceError):
    """A question or search query longer than KB_MAX_QUESTION_CHARS (query_service/limits.py)."""

    code = "question_too_long"


class DatabaseHealth:
    """Whether the database answered when it was last tried, and so how long a request may wait
    for a connection.

    A connection pool waits its full timeout (5 s) for a connection that cannot come while the
    server is down, so during an outage every request would hang 5 s before its 503. Once a
    request has found the database unreachable, the next ones wait `wait_down_s` instead: the
    503 comes at once, and the first request that gets a connection marks it up again.
    """

    def __init__(self, wait_up_s: float = 5.0, wait_down_s: float = 1.0) -> None:
        self.wait_up_s = wait_up_s
        self.wait_down_s = wait_down_s
        self.down = False

    @property
    def wait_s(self) -> float:
        return self.wait_down_s if self.down else self.wait_up_s

    def answered(self) -> None:
        self.down = False

    def failed(self) -> None:
        self.down = True


class ErrorBody(msgspec.Struct):
    """Every error response: a stable code and a sentence for people."""

    error: str
    detail: str


def error_response(description: str) -> ResponseSpec:
    """An error status as OpenAPI documents it: the ErrorBody, described."""
    return ResponseSpec(data_container=ErrorBody, description=description,
                        generate_examples=False)


# Documented on every handler: Litestar's default 400 schema ({status_code, detail, extra}) is
# not what this module sends, and clients need to know the 401/413/429/503 bodies too.
ERROR_RESPONSES = {
    400: error_response("Invalid request: malformed JSON, unknown, missing or out-of-range "
                        "fields, empty or too long text, unknown query id"),
    401: error_response("Missing, unknown, revoked or expired credentials or session"),
    403: error_response("A request made with the page's session cookie lacks its CSRF token"),
    413: error_response("Request body larger than the limit (64 KiB)"),
    429: error_response("Too many requests from this caller; retry after Retry-After seconds"),
    503: error_response("The database is unreachable; retry shortly"),
}


def _body(code: str, detail: str, status: int, headers: dict | None = None) -> Response:
    return Response(ErrorBody(code, detail), status_code=status,
                    media_type=MediaType.JSON, headers=headers)


def _service_error(_: Request, exc: ServiceError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, RateLimitedError) else None
    return _body(exc.code, exc.detail, exc.status_code, headers)


def _validation_error(_: Request, exc: ValidationException) -> Response:
    detail = "; ".join(str(e.get("message", e)) for e in exc.extra) if isinstance(
        exc.extra, list) else exc.detail
    return _body("invalid_request", detail or "invalid request body", 400)


_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          413: "request_too_large", 429: "rate_limited", 503: "unavailable"}


def _http_error(_: Request, exc: HTTPException) -> Response:
    code = _CODES.get(exc.status_code, "invalid_request" if exc.status_code < 500 else "error")
    return _body(code, exc.detail, exc.status_code, exc.headers)


def _database_down(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable: %s", exc)
    health = getattr(request.app.state, "database", None)
    if health is not None:
        health.failed()
    return _body("database_unavailable", "the database is unreachable; retry shortly", 503,
                 {"Retry-After": "5"})


def _index_model_unavailable(_: Request, exc: UnknownEmbedderError) -> Response:
    log.error("cannot embed questions for the live index: %s", exc)
    return _body("unavailable", str(exc), 503)


def json_not_found(response: Response) -> Response:
    """An after-request hook: Litestar's OpenAPI router answers an unknown path under /schema
    (`/schema/../../etc/passwd`) with an HTML 404 page, which no handler here can catch; every
    error of this service is the JSON body."""
    if response.status_code == 404 and response.media_type == MediaType.HTML:
        return _body("not_found", "Not Found", 404)
    return response


def _refused(status: int, code: str) -> Callable[[Request, Exception], Response]:
    """The handler of an engine's refusal: `status` and `code`, its message for the detail."""
    def refused(_: Request, exc: Exception) -> Response:
        return _body(code, str(exc), status)

    return refused


def _unexpected(_: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return _body("internal_error", "an unexpected error occurred; it has been logged", 500)


EXCEPTION_HANDLERS = {
    ServiceError: _service_error,
    ValidationException: _validation_error,
    HTTPException: _http_error,
    psycopg.OperationalError: _database_down,
    psycopg_pool.PoolTimeout: _database_down,
    UnknownEmbedderError: _index_model_unavailable,
    CorrectionError: _refused(400, "invalid_correction"),
    # A correction the reviewer may not read looks like one that does not exist.
    UnknownCorrectionError: _refused(404, "not_found"),
    # An answer another caller received looks like one never given, or purged.
    UnknownQueryError: _refused(404, "unknown_query"),
    ChangedOriginalError: _refused(409, "document_changed"),
    Exception: _unexpected,
}
