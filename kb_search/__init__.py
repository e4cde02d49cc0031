"""The engine that answers questions: planner, synonyms, hybrid search, rerankers, the
answerability decision and the answerers with their verification. Its one face is
`KnowledgeBase`, opened from the configuration by `open_knowledge_base`: every door imports it
and the public types of its results from here, and nothing else of the engine (an
import-linter contract in pyproject.toml)."""

from kb_search.answerers import NOT_FOUND
from kb_search.answerers.numbering import AnswerDelta, CitationNumber
from kb_search.asking import AnswerPart, AskResult, Citation
from kb_search.comparison import Comparison
from kb_search.corrections import (
    MAX_PASSAGES,
    CorrectedPassage,
    CorrectionError,
    CorrectionForReview,
    UnknownCorrectionError,
)
from kb_search.entity_cards import (
    EntityCard,
    EntityDocument,
    EntityLink,
    EntityMatch,
    EntityPassage,
    EntityRelation,
    RelationEvidence,
)
from kb_search.gap_report import (
    GapDocument,
    GapQuestion,
    GapReport,
    GapTopic,
    StaleDocument,
    UncitedDocument,
)
from kb_search.knowledge_base import (
    ASK_MODES,
    AnswerEvent,
    AskMode,
    Assessment,
    KnowledgeBase,
    OfferedPassage,
    OfferedPassages,
    Stage,
    StagePart,
    open_knowledge_base,
    public,
    quoted_passage,
)
from kb_search.search import MODES, Mode, Ranks, SearchHit, SearchResult
from kb_search.sources import ChangedOriginalError, DocumentPassage, DocumentView, Original

__all__ = [
    "ASK_MODES",
    "MAX_PASSAGES",
    "MODES",
    "NOT_FOUND",
    "AnswerDelta",
    "AnswerEvent",
    "AnswerPart",
    "AskMode",
    "AskResult",
    "Assessment",
    "ChangedOriginalError",
    "Citation",
    "CitationNumber",
    "Comparison",
    "CorrectedPassage",
    "CorrectionError",
    "CorrectionForReview",
    "DocumentPassage",
    "DocumentView",
    "EntityCard",
    "EntityDocument",
    "EntityLink",
    "EntityMatch",
    "EntityPassage",
    "EntityRelation",
    "GapDocument",
    "GapQuestion",
    "GapReport",
    "GapTopic",
    "KnowledgeBase",
    "Mode",
    "OfferedPassage",
    "OfferedPassages",
    "Original",
    "Ranks",
    "RelationEvidence",
    "SearchHit",
    "SearchResult",
    "Stage",
    "StagePart",
    "StaleDocument",
    "UncitedDocument",
    "UnknownCorrectionError",
    "open_knowledge_base",
    "public",
    "quoted_passage",
]
