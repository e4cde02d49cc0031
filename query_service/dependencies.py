"""What a handler is given: the caller its guard verified (guards.py), the page's session, the
name the caller signs with, the knowledge base's service its controller uses, and the request
body, decoded once with the types its schema states."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from litestar import Request
from litestar.datastructures import State
from litestar.dto import AbstractDTO
from litestar.openapi.spec import Reference, Schema
from litestar.typing import FieldDefinition

from kb_core.callers import Caller
from kb_search import Corrections, Entities, Gaps, Operations, QueryLog, Questions, Sources
from query_service.errors import ServiceError
from query_service.hostile_input import MAX_JSON_DEPTH, nested_too_deep
from query_service.sessions import WebSession

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator

__all__ = [
    "ExactBody",
    "provide_caller",
    "provide_corrections",
    "provide_display_name",
    "provide_entities",
    "provide_gaps",
    "provide_operations",
    "provide_query_log",
    "provide_questions",
    "provide_session",
    "provide_sources",
]


def provide_caller(request: Request) -> Caller:
    """The caller guards.requires_caller verified for this request."""
    return request.state.caller


async def provide_session(request: Request, state: State) -> WebSession | None:
    """The page's session of this browser, if it has a live one."""
    session_id = request.cookies.get(state.sessions.cookie_name)
    if not session_id:
        return None
    async with state.identity_pool.connection(timeout=state.database.wait_s) as aconn:
        return await state.sessions.find(aconn, session_id)


def provide_display_name(caller: Caller, session: WebSession | None) -> str:
    """Who the caller is to people: the page's display name, else its subject (a token's
    name)."""
    return session.display_name if session is not None and session.caller == caller \
        else caller.subject


# The services of the knowledge base opened in the app's lifespan, one per concern.

def provide_questions(state: State) -> Questions:
    return state.knowledge_base.questions


def provide_query_log(state: State) -> QueryLog:
    return state.knowledge_base.query_log


def provide_sources(state: State) -> Sources:
    return state.knowledge_base.sources


def provide_entities(state: State) -> Entities:
    return state.knowledge_base.entities


def provide_corrections(state: State) -> Corrections:
    return state.knowledge_base.corrections


def provide_gaps(state: State) -> Gaps:
    return state.knowledge_base.gaps


def provide_operations(state: State) -> Operations:
    return state.knowledge_base.operations


class ExactBody(AbstractDTO):
    """The `data` of a handler, decoded from the request body once, with the types its
    annotation (and so the OpenAPI schema) states. Litestar converts bodies in lax mode, which
    took 0 for false and "5" for 5 (schemathesis sent {"stream": 0} and got an answer): a
    client that sends other types has a bug it should hear about. JSON Schema counts 28.0 as
    an integer, so integral numbers stay acceptable wherever an integer is.

    Litestar decodes the body before it resolves dependencies and after the guards, so a
    caller is verified (guards.py) before its body is read. Only the decoding is this DTO's:
    the schema is the annotation's, as without a DTO, and responses are encoded as Litestar
    encodes them."""

    @classmethod
    def create_for_field_definition(cls, field_definition: FieldDefinition, handler_id: str,
                                    backend_cls: object = None) -> None:
        pass  # Litestar's own DTOs build a transfer model here; this one decodes the annotation

    @classmethod
    def create_openapi_schema(cls, field_definition: FieldDefinition, handler_id: str,
                              schema_creator: SchemaCreator) -> Reference | Schema:
        return schema_creator.for_field_definition(field_definition)

    @classmethod
    def is_supported_model_type_field(cls, field_definition: FieldDefinition) -> bool:
        return False  # never a response's

    def decode_bytes(self, value: bytes) -> msgspec.Struct:
        body = self.asgi_connection.route_handler.parsed_data_field.annotation
        if nested_too_deep(value):
            raise ServiceError(f"invalid request body: JSON nested deeper than {MAX_JSON_DEPTH} "
                               f"arrays and objects")
        try:
            return msgspec.convert(_integral(msgspec.json.decode(value)), body)
        except msgspec.DecodeError as exc:  # malformed JSON, or not what the schema states
            raise ServiceError(f"invalid request body: {exc}") from None


def _integral(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value
