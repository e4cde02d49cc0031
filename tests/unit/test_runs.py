"""How the sensor and `kb ingest` split changed documents into runs (kb_pipeline/runs.py)."""

from __future__ import annotations

from kb_pipeline.runs import MAX_CHANGED_PER_RUN, partition_ranges

KEYS = [f"doc{i:04}.md" for i in range(450)]


def test_many_changed_keys_are_split_into_ranges_of_at_most_the_limit():
    ranges = partition_ranges(KEYS, KEYS)
    assert MAX_CHANGED_PER_RUN == 200
    assert ranges == [("doc0000.md", "doc0199.md"), ("doc0200.md", "doc0399.md"),
                      ("doc0400.md", "doc0449.md")]


def test_scattered_changes_make_one_range_over_the_unchanged_keys_between_them():
    changed = ["doc0449.md", "doc0003.md", "doc0200.md", "doc0003.md"]
    assert partition_ranges(KEYS, changed) == [("doc0003.md", "doc0449.md")]
    assert partition_ranges(KEYS, changed, max_changed=2) == [("doc0003.md", "doc0200.md"),
                                                               ("doc0449.md", "doc0449.md")]


def test_nothing_changed_makes_no_range():
    assert partition_ranges(KEYS, []) == []
