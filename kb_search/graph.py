"""The graph leg: passages one reference away from what the question names.

「QC-2031の対象ロットを製造した工場の品質責任者は誰？」 names QC-2031 and 品質責任者. The
passage that answers it, the organisation chart's row, names 湖西工場 and 品質責任者, not
QC-2031; QC-2031's report names 湖西工場. The other legs find the report; this leg finds the
row. Each entity the question names (kb_core/entities.py) counts for a passage with its
specificity, log(1 + readable passages / passages naming it): wholly where the passage names
it, in part where the passage names one of its neighbours (an entity named with it), by how
often the two are named together and how specific the neighbour is. The leg returns only
passages that cover an entity through a neighbour: one that names everything it covers is the
other legs' to find. Every count is over the passages the caller may read (sql/queries/
search.sql, graph_leg), so no document outside the caller's groups moves its ranking.
"""

from __future__ import annotations

import math
from collections import defaultdict

import psycopg

from kb_core.entities import Entity
from kb_core.queries import query

__all__ = ["FANOUT", "HOP", "HUB", "graph_leg"]

# An entity named in more readable passages than this (部長, 就業規則 in a large index) leads
# nowhere: its neighbours would be half the index. It still counts where a passage reached
# through another entity names it.
HUB = 50
FANOUT = 40  # neighbours followed from each of the question's entities, strongest first
# What a neighbour's passage is worth for the entity it stands for, at most (strength s counts
# s / (s + 1) of it): less than naming the entity itself.
HOP = 0.5


def graph_leg(conn: psycopg.Connection, entities: list[Entity], things: list[str],
              groups: list[str], readable: float, exact: bool, limit: int
              ) -> list[tuple[int, float]]:
    """The caller's best `limit` passages by the question's entities, as (id, score), best
    first: the rules' `entities`, and `things`, the keys of those known by name alone (the LLM
    extractor's) that the question writes (search_scope in sql/queries/search.sql finds them).
    `readable` is how many passages the caller may read, `exact` whether they are few enough
    to be looked up by group (the search's plan for the caller, kb_search/search.py)."""
    keys = [entity.key for entity in entities]
    keys += [key for key in things if key not in keys]
    if not keys:
        return []
    readable = max(readable, 1.0)  # statistics that drifted low (a failed check) divide by 0
    rows = conn.execute(query("graph_leg"), {
        "entities": keys, "groups": groups, "hub": HUB, "fanout": FANOUT, "exact": exact},
        prepare=True)
    named: dict[str, set[int]] = defaultdict(set)  # entity -> passages naming it (<= HUB + 1)
    also: dict[str, set[int]] = defaultdict(set)  # entity -> reached passages naming it
    hops: dict[tuple[str, str], tuple[int, set[int]]] = {}  # (entity, neighbour) -> evidence
    for how, source, target, strength, chunk_id in rows:
        if how == "hop":
            hops.setdefault((source, target), (strength, set()))[1].add(chunk_id)
        else:
            (named if how == "named" else also)[source].add(chunk_id)
    weight = {key: math.log(1 + readable / len(passages)) for key, passages in named.items()}
    for key, passages in named.items():
        if len(passages) > HUB:  # a hub: only its passages reached otherwise are known to count
            named[key] = also[key]
    cover: dict[int, dict[str, float]] = defaultdict(dict)
    for (source, _), (strength, passages) in hops.items():
        if len(passages) > HUB:  # a hub neighbour: its passages were not all read
            continue
        # A neighbour few passages name says more of where the entity leads than one that
        # many name.
        specific = math.log(1 + readable / len(passages)) / math.log(1 + readable)
        worth = HOP * strength / (strength + 1) * specific
        for chunk_id in passages:
            cover[chunk_id][source] = max(cover[chunk_id].get(source, 0.0), worth)
    # The leg's passages are those one reference away: a passage that names every entity it
    # covers is the other legs' to find.
    for key, passages in named.items():
        for chunk_id in passages:
            if chunk_id in cover:
                cover[chunk_id][key] = 1.0
    scored = [(chunk_id, sum(weight.get(key, 0.0) * worth for key, worth in by_key.items()))
              for chunk_id, by_key in cover.items() if min(by_key.values()) < 1.0]
    return sorted(scored, key=lambda pair: (-pair[1], pair[0]))[:limit]
