"""Entity cards over HTTP: find an entity by name, and its card (where the caller's passages
name it, by document, and what they name it with). Filtered by the caller's groups in SQL like
search: an entity no passage the caller may read names is a 404, exactly as one that does not
exist (docs/knowledge-graph.md)."""

from __future__ import annotations

from typing import Annotated

import anyio
import msgspec
from litestar import Controller, get
from litestar.di import Provide
from litestar.exceptions import NotFoundException
from litestar.params import Parameter

from kb_core.callers import Caller
from kb_search import Entities, EntityCard, EntityMatch, public
from query_service.dependencies import provide_caller, provide_entities
from query_service.errors import ERROR_RESPONSES, error_response, refuse_unknown_query
from query_service.guards import requires_caller
from query_service.schemas import BEARER

__all__ = ["EntitiesController"]

MAX_NAME = 200  # characters of a name looked up; entities' names are a few dozen at most


class EntityMatches(msgspec.Struct):
    entities: list[EntityMatch]


class EntitiesController(Controller):
    path = "/v1/entities"
    tags = ["entities"]
    guards = [requires_caller]
    dependencies = {"caller": Provide(provide_caller, sync_to_thread=False),
                    "entities": Provide(provide_entities, sync_to_thread=False)}
    security = [{BEARER: []}]

    @get("/", operation_id="find_entities", responses=ERROR_RESPONSES,
         before_request=refuse_unknown_query)
    async def find(self, caller: Caller, entities: Entities,
                   name: Annotated[str, Parameter(min_length=1, max_length=MAX_NAME)]
                   ) -> EntityMatches:
        """Entities whose normalised name (NFKC, case, a code's dashes) is `name`'s, first,
        then those it begins; only those the caller's passages name."""
        return EntityMatches(await anyio.to_thread.run_sync(entities.find, caller, name))

    @get("/{entity_id:str}", operation_id="entity", before_request=refuse_unknown_query,
         responses=ERROR_RESPONSES | {404: error_response(
             "No such entity among those the caller's passages name")})
    async def entity(self, entity_id: Annotated[str, Parameter(max_length=MAX_NAME)],
                     caller: Caller, entities: Entities) -> EntityCard:
        """An entity's card: the caller's passages that name it, grouped by document, and the
        entities they name with it, with the passages as evidence."""
        card = await anyio.to_thread.run_sync(entities.card, caller, entity_id)
        if card is None:
            raise NotFoundException("no such entity")
        return public(card)
