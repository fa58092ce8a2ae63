"""One pairing of runs (`gradetrail_lib.analysis.pairwise`) for the HTML report and the Dagster
leaderboard: the hash check, the comparison, a refusal instead of an error."""

from gradetrail_lib.analysis.pairwise import compare_runs, every_pair
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.runs import Run
from gradetrail_lib.results.trace import TraceRecord
from tests.support.traces import SCORER, manifest, record


def run(scores: list[float], scorer_hash: str = "s" * 64) -> Run:
    records: list[TraceRecord] = [record(f"s{i:03d}", v) for i, v in enumerate(scores)]
    return Run.of(manifest({SCORER: scorer_hash}), records)


def test_every_pair_in_order_with_a_verdict_a_refusal_and_an_unreadable_run() -> None:
    good, bad = run([1.0] * 30), run([0.0] * 30)
    other_scorer = run([1.0] * 30, scorer_hash="t" * 64)
    unreadable = InputError("runs/x", None, None, "not a run directory (no results.jsonl)")
    pairings = every_pair(
        [("good", good), ("bad", bad), ("x", unreadable), ("other", other_scorer)]
    )
    labels = [(p.label_a, p.label_b) for p in pairings]
    assert labels == [
        ("good", "bad"), ("good", "x"), ("good", "other"),
        ("bad", "x"), ("bad", "other"), ("x", "other"),
    ]  # fmt: skip
    first = pairings[0]
    assert first.scorer == SCORER and first.refused is None
    assert first.comparison is not None and first.comparison.verdict == "A"
    assert first.winner == "good"
    assert pairings[1].comparison is None and pairings[1].winner is None
    assert pairings[1].refused == f"x: {unreadable}"
    assert pairings[2].refused is not None and "hash differs" in pairings[2].refused
    # Both sides unreadable or not, a pair with an unreadable run is refused per scorer.
    assert pairings[5].scorer == SCORER and pairings[5].refused == f"x: {unreadable}"


def test_compare_runs_forced_keeps_the_mismatch_as_a_note() -> None:
    a, b = run([1.0] * 10), run([1.0] * 10, scorer_hash="t" * 64)
    forced = compare_runs(a, b, SCORER, force=True)
    assert any("forced" in note for note in forced.notes)
    (refused,) = every_pair([("a", a), ("b", b)])
    assert refused.comparison is None and refused.refused is not None
    assert refused.refused.startswith("refusing to compare")
