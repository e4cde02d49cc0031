"""The /v1 API, one controller per domain: questions (search, answers, feedback), the cited
documents, entity cards, corrections and the knowledge-gap report."""

from query_service.controllers.corrections import CorrectionsController
from query_service.controllers.documents import DocumentsController
from query_service.controllers.entities import EntitiesController
from query_service.controllers.gaps import GapsController
from query_service.controllers.questions import QuestionsController

__all__ = ["CorrectionsController", "DocumentsController", "EntitiesController",
           "GapsController", "QuestionsController"]
