"""The engine that answers questions: planner, synonyms, hybrid search, rerankers, the
answerability decision and the answerers with their verification. Its one face is the root
`KnowledgeBase`, opened from the configuration by `open_knowledge_base`, with one service per
concern (`kb.questions`, `kb.query_log`, `kb.sources`, `kb.corrections`, `kb.entities`,
`kb.gaps`, `kb.operations`): every door imports the root, the services' types and the public
types of their results from here, and nothing else of the engine (an import-linter contract in
pyproject.toml)."""

from kb_search.answer_flow import (
    ASK_MODES,
    AnswerEvent,
    AskMode,
    OfferedPassage,
    OfferedPassages,
    Stage,
    StagePart,
)
from kb_search.answerers import NOT_FOUND
from kb_search.answerers.numbering import AnswerDelta, CitationNumber
from kb_search.comparison import Comparison
from kb_search.corrections import (
    MAX_PASSAGES,
    CorrectedPassage,
    CorrectionError,
    CorrectionForReview,
    Corrections,
    UnknownCorrectionError,
)
from kb_search.entity_cards import (
    Entities,
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
    Gaps,
    GapTopic,
    StaleDocument,
    UncitedDocument,
)
from kb_search.grounded_answers import AnswerPart, AskResult, Citation
from kb_search.knowledge_base import KnowledgeBase, open_knowledge_base, public, quoted_passage
from kb_search.operations import (
    IndexCounts,
    IndexedDocument,
    IndexGeneration,
    IndexStatus,
    Operations,
)
from kb_search.passage_reference import PassageRef, ReadByOcr, reference
from kb_search.query_log import (
    QueryLog,
    RecentQuestion,
    ReopenedCitation,
    ReopenedTurn,
    UnknownQueryError,
)
from kb_search.questions import Assessment, Questions
from kb_search.search import MODES, Mode, Ranks, SearchHit, SearchResult
from kb_search.sources import (
    ChangedOriginalError,
    DocumentPassage,
    DocumentView,
    Original,
    Sources,
)

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
    "Corrections",
    "DocumentPassage",
    "DocumentView",
    "Entities",
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
    "Gaps",
    "IndexCounts",
    "IndexGeneration",
    "IndexStatus",
    "IndexedDocument",
    "KnowledgeBase",
    "Mode",
    "OfferedPassage",
    "OfferedPassages",
    "Operations",
    "Original",
    "PassageRef",
    "QueryLog",
    "Questions",
    "Ranks",
    "ReadByOcr",
    "RecentQuestion",
    "RelationEvidence",
    "ReopenedCitation",
    "ReopenedTurn",
    "SearchHit",
    "SearchResult",
    "Sources",
    "Stage",
    "StagePart",
    "StaleDocument",
    "UncitedDocument",
    "UnknownCorrectionError",
    "UnknownQueryError",
    "open_knowledge_base",
    "public",
    "quoted_passage",
    "reference",
]
