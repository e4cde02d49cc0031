"""What `bench/service.py --conversations` asks and what it prints: a conversation set (kb_eval
.conversations) whose turns are asked over HTTP with `follows`, single questions drawn beside
them, and the last turns scored by kb_eval.conversations against their standalone form and their
own words asked alone, with the latency of the last turn against a single question's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from deep import WARMUP, Asked, draw_singles, latency, question_key

from kb_eval.conversations import (
    AskedThreeWays,
    EvalConversation,
    load_conversations,
    ratios,
    score_conversations,
    text_report,
)

__all__ = ["ConversationPass", "ConversationSet", "alone_key", "conversation_report",
           "conversation_set", "groups_of"]

# The targets: follow-up ÷ standalone (÷ alone for a change of topic), and the last
# turn's p95 over a single question's.
HELD_TARGET = 0.95
TOPIC_CHANGE_TARGET = 0.99
P95_TARGET = 1.5


@dataclass(frozen=True)
class ConversationSet:
    """The conversations of one bench, as many single questions (one asked after each), the
    warm-up questions, and the groups of a line that names none."""

    conversations: list[EvalConversation]
    singles: list[str]
    warmup: list[str]
    groups: tuple[str, ...]

    def alone_questions(self) -> list[tuple[tuple[str, ...], str]]:
        """Every distinct (groups, question) asked alone: each last turn's standalone form and
        its own words (one question where they are the same, as in a change of topic)."""
        asked = [alone_key(self, c, way) for c in self.conversations
                 for way in ("standalone", "alone")]
        return list(dict.fromkeys(asked))


@dataclass(frozen=True)
class ConversationPass:
    """One pass over the set: each conversation's last turn (asked after its earlier turns,
    with `follows`), each followed by its single question."""

    last_turns: list[Asked]
    singles: list[Asked]


def groups_of(cset: ConversationSet, conversation: EvalConversation) -> tuple[str, ...]:
    """Whom a conversation is asked as: its own groups, else the set's."""
    return tuple(conversation.groups) if conversation.groups is not None else cset.groups


def alone_key(cset: ConversationSet, conversation: EvalConversation,
              way: str) -> tuple[tuple[str, ...], str]:
    """The (groups, question) of a last turn asked alone: its "standalone" form or its own
    words ("alone")."""
    last = conversation.last
    question = (last.standalone or last.question) if way == "standalone" else last.question
    return groups_of(cset, conversation), question


def conversation_set(path: Path, singles_file: Path, limit: int | None,
                     groups: tuple[str, ...]) -> ConversationSet:
    """The first `limit` conversations of `path` and as many single questions of
    `singles_file` (`draw_singles`) that are no turn of any conversation nor a standalone
    form; the draw does not depend on `limit`, which keeps its prefix."""
    conversations = load_conversations(path)
    taken = {question_key(t.standalone or t.question) for c in conversations for t in c.turns}
    taken |= {question_key(t.question) for c in conversations for t in c.turns}
    drawn = draw_singles(singles_file, taken, len(conversations) + WARMUP, groups)
    count = len(conversations) if limit is None else min(limit, len(conversations))
    return ConversationSet(conversations[:count], drawn[:count], drawn[len(conversations):],
                           groups)


def _latency_lines(cset: ConversationSet, passes: Sequence[ConversationPass]) -> list[str]:
    per_pass = [(latency(p.last_turns), latency(p.singles)) for p in passes]
    lines = ["latency ms, median / p95 (the last turn: asked with follows, after its earlier "
             "turns):"]
    for number, (last, single) in enumerate(per_pass, start=1):
        lines.append(f"  pass {number}: last turn {last[0]:.0f} / {last[1]:.0f}; single "
                     f"{single[0]:.0f} / {single[1]:.0f}; p95 ratio {last[1] / single[1]:.2f}")
    (l50, l95), (s50, s95) = [[float(np.median([p[kind][i] for p in per_pass])) for i in (0, 1)]
                              for kind in (0, 1)]
    lines.append(f"  medians of the passes: last turn {l50:.0f} / {l95:.0f}; single "
                 f"{s50:.0f} / {s95:.0f}; median ratio {l50 / s50:.2f}")
    for kind in sorted({c.kind for c in cset.conversations}):
        picked = [i for i, c in enumerate(cset.conversations) if c.kind == kind]
        timings = [latency([p.last_turns[i] for i in picked]) for p in passes]
        lines.append(f"  {kind:<14} n {len(picked):>4}: last turn "
                     f"{np.median([m for m, _ in timings]):.0f} / "
                     f"{np.median([p95 for _, p95 in timings]):.0f}")
    lines.append(f"p95 ratio last turn / single: {l95 / s95:.2f} (target ≤ {P95_TARGET})")
    return lines


def _target_lines(cset: ConversationSet, scored: Sequence[AskedThreeWays]) -> list[str]:
    report = score_conversations(scored)
    lines = [text_report(report)]
    if held := ratios(report.all, "all"):
        lines.append(f"all: follow-up ÷ standalone cited {held[1]:.3f}, gold {held[2]:.3f} "
                     f"(targets ≥ {HELD_TARGET})")
    if "topic_change" in report.kinds:
        held = ratios(report.kinds["topic_change"], "topic_change")
        assert held is not None
        lines.append(f"topic_change: follow-up ÷ alone cited {held[1]:.3f}, gold "
                     f"{held[2]:.3f} (targets ≥ {TOPIC_CHANGE_TARGET})")
    left_out = len(cset.conversations) - len(scored)
    if left_out:
        lines.append(f"{left_out} conversations left out: a request of theirs failed")
    return lines


def conversation_report(cset: ConversationSet, passes: Sequence[ConversationPass],
                        alone: dict[tuple[tuple[str, ...], str], Asked]) -> list[str]:
    """The bench's closing lines: the latency of every pass and the medians, then the first
    pass's last turns scored (kb_eval.conversations) beside the questions asked alone
    (`alone`, by groups and question)."""
    errors = sum(a.answer is None for p in passes for a in (*p.last_turns, *p.singles))
    errors += sum(a.answer is None for a in alone.values())
    lines = [f"n: {len(cset.conversations)} conversations, {len(cset.singles)} single "
             f"questions, {len(alone)} distinct questions asked alone; {len(passes)} latency "
             f"passes; failed requests: {errors}"]
    lines += _latency_lines(cset, passes)
    scored = []
    for conversation, follow_up in zip(cset.conversations, passes[0].last_turns, strict=True):
        standalone = alone[alone_key(cset, conversation, "standalone")].answer
        own_words = alone[alone_key(cset, conversation, "alone")].answer
        if follow_up.answer is not None and standalone is not None and own_words is not None:
            scored.append(AskedThreeWays(conversation, follow_up.answer, standalone, own_words))
    return lines + _target_lines(cset, scored)
