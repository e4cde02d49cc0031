"""Conversations as an evaluation set: each line's last turn follows the turns before it
(「それは誰に出すの？」 after 「年次有給休暇は何日前までに申請が必要ですか」), and is scored three
ways, side by side: asked as the follow-up it is (the earlier turns asked first, in one
conversation), its `standalone` form asked alone (the same question written out in full), and
the follow-up's own words asked alone (what the product did before it read conversations).

A line: {"turns": [{"question"}, …, {"question", "standalone", "expected_source", "answer"}],
"groups": [...], "kind": "pronoun" | "ellipsis" | "topic_change" | "unreadable"}; an
`unreadable` conversation's last turn asks about a document its groups may not read
(expected_source and answer null): its right answer is "not found"."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec

from kb_core.callers import Caller
from kb_core.progress import report as report_progress
from kb_eval.question_sets import holds_answer, source_matches
from kb_search import AskResult, KnowledgeBase

__all__ = ["AskedThreeWays", "ConversationReport", "EvalConversation", "is_conversation_set",
           "load_conversations", "ratios", "run_conversations", "score_conversations",
           "text_report"]


class EvalTurn(msgspec.Struct, omit_defaults=True):
    question: str
    standalone: str | None = None
    expected_source: str | None = None
    answer: str | None = None


class EvalConversation(msgspec.Struct, omit_defaults=True):
    turns: list[EvalTurn]
    groups: list[str] | None = None
    kind: str = "pronoun"

    @property
    def last(self) -> EvalTurn:
        return self.turns[-1]


class Asked(msgspec.Struct):
    """How one way of asking the last turn fared over a kind's conversations."""

    cited: float  # the expected document cited (answerable ones)
    gold_in_answer: float  # the gold span in the answer (answerable ones)
    not_found: float  # answered "not found" (the unreadable ones: the right answer)


class KindFigures(msgspec.Struct):
    conversations: int
    follow_up: Asked  # asked after its earlier turns, in one conversation
    standalone: Asked  # its standalone form asked alone
    alone: Asked  # its own words asked alone


class AskedThreeWays(msgspec.Struct):
    """The answers to one conversation's last turn, asked each way (by the engine or over HTTP)."""

    conversation: EvalConversation
    follow_up: AskResult  # after its earlier turns, in one conversation
    standalone: AskResult  # its standalone form asked alone
    alone: AskResult  # its own words asked alone


class ConversationReport(msgspec.Struct):
    conversations: int
    kinds: dict[str, KindFigures]
    all: KindFigures  # every answerable kind together (unreadable counted in not_found only)
    asked_as: list[tuple[str, str]]  # a sample: the follow-up and how it was searched


def is_conversation_set(path: Path) -> bool:
    """Whether a JSONL file holds conversations (its first line has "turns")."""
    with open(path, encoding="utf-8-sig") as lines:
        first = next((line for line in lines if line.strip()), "{}")
    try:
        return "turns" in json.loads(first)
    except ValueError:
        return False


def load_conversations(path: Path) -> list[EvalConversation]:
    """The conversations of a JSONL file; ValueError naming the line of a malformed one (no
    turns, an empty question, an answerable last turn without expected_source)."""
    conversations = []
    with open(path, encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {number}"
            try:
                conversation = msgspec.json.decode(line, type=EvalConversation)
            except msgspec.DecodeError as err:
                raise ValueError(f"{where}: {err}") from err
            if len(conversation.turns) < 2 or not all(t.question.strip()
                                                       for t in conversation.turns):
                raise ValueError(f"{where}: a conversation needs two or more turns, each "
                                 "with a question")
            if conversation.kind != "unreadable" and not conversation.last.expected_source:
                raise ValueError(f"{where}: the last turn needs \"expected_source\"")
            conversations.append(conversation)
    return conversations


def run_conversations(kb: KnowledgeBase, conversations: list[EvalConversation],
                      groups: Sequence[str] = ()) -> ConversationReport:
    """Each conversation's last turn asked three ways (as a follow-up, standalone, alone), as
    an "eval" caller with the conversation's groups (else `groups`); neither cached nor
    logged."""
    report_progress("questions", count=3 * len(conversations))
    asked: list[AskedThreeWays] = []
    for conversation in conversations:
        caller = Caller(kind="eval", subject="eval", groups=tuple(
            conversation.groups if conversation.groups is not None else groups))
        last = conversation.last
        follow_up = kb.questions.assess_follow_up(
            caller, [t.question for t in conversation.turns[:-1]], last.question)
        report_progress("question")
        standalone = _alone(kb, caller, last.standalone or last.question)
        alone = _alone(kb, caller, last.question)
        asked.append(AskedThreeWays(conversation, follow_up, standalone, alone))
    return score_conversations(asked)


def score_conversations(asked: Sequence[AskedThreeWays]) -> ConversationReport:
    """The figures of the last turns' answers, per kind and over every kind, each way."""
    kinds = sorted({a.conversation.kind for a in asked})
    return ConversationReport(
        conversations=len(asked),
        kinds={kind: _figures([a for a in asked if a.conversation.kind == kind])
               for kind in kinds},
        all=_figures(asked),
        asked_as=[(a.conversation.last.question, a.follow_up.asked_as) for a in asked
                  if a.follow_up.asked_as != a.conversation.last.question][:10])


def ratios(figures: KindFigures, kind: str) -> tuple[str, float, float] | None:
    """What the follow-up is held against (the standalone form; for a change of topic, the
    question asked alone, which names its own topic), and its cited and gold rates over that
    baseline's; None for a kind with no answerable last turn."""
    if kind == "unreadable":
        return None
    baseline, against = (("alone", figures.alone) if kind == "topic_change"
                         else ("standalone", figures.standalone))
    return (baseline, _over(figures.follow_up.cited, against.cited),
            _over(figures.follow_up.gold_in_answer, against.gold_in_answer))


def text_report(report: ConversationReport) -> str:
    """The figures as a table a person reads: per kind, each way of asking."""
    lines = [f"conversations: {report.conversations} (last turn scored)",
             f"{'kind':<14}{'n':>4}  {'asked as':<11}{'cited':>7}{'gold':>7}{'not found':>11}"]
    for kind, figures in [*report.kinds.items(), ("all", report.all)]:
        for label, way in (("follow-up", figures.follow_up), ("standalone", figures.standalone),
                           ("alone", figures.alone)):
            head = (f"{kind:<14}{figures.conversations:>4}" if label == "follow-up"
                    else " " * 18)
            lines.append(f"{head}  {label:<11}{way.cited:>7.3f}{way.gold_in_answer:>7.3f}"
                         f"{way.not_found:>11.3f}")
    lines.append("follow-up ÷ baseline (cited, gold):")
    for kind, figures in [*report.kinds.items(), ("all", report.all)]:
        if held := ratios(figures, kind):
            lines.append(f"  {kind:<14}÷ {held[0]:<11}{held[1]:>7.3f}{held[2]:>7.3f}")
    lines.append("searched as (a sample):")
    lines += [f"  {question} → {searched}" for question, searched in report.asked_as]
    return "\n".join(lines)


def _alone(kb: KnowledgeBase, caller: Caller, question: str) -> AskResult:
    answer = kb.questions.assess(caller, question).answer
    assert answer is not None
    report_progress("question")
    return answer


def _figures(asked: Sequence[AskedThreeWays]) -> KindFigures:
    answerable = [(a.conversation.last, a.follow_up, a.standalone, a.alone) for a in asked
                  if a.conversation.last.expected_source]
    unreadable = [(a.follow_up, a.standalone, a.alone) for a in asked
                  if not a.conversation.last.expected_source]

    def way(index: int) -> Asked:
        scored = [(turn, results[index]) for turn, *results in answerable]
        refused = [results[index] for results in unreadable]
        return Asked(
            cited=_rate([_cites(r, t.expected_source or "") for t, r in scored]),
            gold_in_answer=_rate([r.found and holds_answer(r.answer, t.answer or "")
                                  for t, r in scored if t.answer]),
            not_found=_rate([not r.found for r in refused]))

    return KindFigures(conversations=len(asked), follow_up=way(0), standalone=way(1),
                       alone=way(2))


def _cites(result: AskResult, expected: str) -> bool:
    return any(source_matches(c.source_uri, expected) for c in result.citations)


def _over(value: float, baseline: float) -> float:
    return round(value / baseline, 3) if baseline else 0.0


def _rate(values: list[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0
