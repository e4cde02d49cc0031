"""`kb entities show NAME --groups …`: an entity's card as a caller of those groups sees it:
the passages that name it, by document, and what they name it with."""

from __future__ import annotations

import argparse
import sys

import msgspec

from kb_cli.output import emit
from kb_core.callers import Caller
from kb_core.settings import Settings
from kb_search import EntityCard, EntityMatch, open_knowledge_base

__all__ = ["run"]

SHOWN = 10  # documents and relations printed; --json holds them all


class _Shown(msgspec.Struct):
    card: EntityCard
    others: list[EntityMatch]  # other entities the name begins


def run(args: argparse.Namespace, settings: Settings) -> int:
    caller = Caller(kind="cli", subject="kb entities", groups=args.groups)
    with open_knowledge_base(settings, connections=1, answers=False) as kb:
        matches = kb.entities.find(caller, args.name)
        card = kb.entities.card(caller, matches[0].id) if matches else None
    if card is None:
        print(f"kb entities: no entity named 「{args.name}」 in the passages of "
              f"{', '.join(args.groups)}", file=sys.stderr)
        return 1
    shown = _Shown(card, matches[1:])
    emit(args, shown, lambda: _show(shown))
    return 0


def _show(shown: _Shown) -> None:
    card = shown.card
    print(f"{card.name} ({card.kind}, id {card.id}): named in {card.passages} passages of "
          f"{len(card.documents)} documents")
    said = next((p.description for d in card.documents for p in d.passages if p.description),
                None)
    if said:  # the LLM extractor's (KB_GRAPH_LLM), from a passage of the caller's
        print(f"  {said}")
    for document in card.documents[:SHOWN]:
        headings = "、".join(p.heading or "（冒頭）" for p in document.passages[:3])
        more = f" and {len(document.passages) - 3} more" if len(document.passages) > 3 else ""
        print(f"  {document.path}: {headings}{more}")
    _more(len(card.documents), "documents")
    if card.relations:
        print("named with:")
    for relation in card.relations[:SHOWN]:
        how = f" ({', '.join(relation.references)})" if relation.references else ""
        evidence = relation.evidence[0]
        print(f"  {relation.name} ({relation.kind}) · {relation.passages} passages{how} · "
              f"e.g. {evidence.path} {evidence.heading}".rstrip())
        if relation.descriptions:
            print(f"    {relation.descriptions[0]}")
    _more(len(card.relations), "related entities")
    if shown.others:
        print("also: " + "、".join(m.name for m in shown.others[:SHOWN]))


def _more(total: int, what: str) -> None:
    if total > SHOWN:
        print(f"  and {total - SHOWN} more {what} (all of them with --json)")
