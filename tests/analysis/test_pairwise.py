"""One pairing of runs (`gradetrail_lib.analysis.pairwise`) for the HTML report and the Dagster
leaderboard: the hash check, the comparison, a refusal instead of an error."""

from gradetrail_lib.analysis.pairwise import every_pair
from gradetrail_lib.analysis.stats import compare
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


def test_every_pair_refuses_a_pair_whose_scorer_hash_differs() -> None:
    a, b = run([1.0] * 10), run([1.0] * 10, scorer_hash="t" * 64)
    (refused,) = every_pair([("a", a), ("b", b)])
    assert refused.comparison is None and refused.refused is not None
    assert refused.refused.startswith("refusing to compare")


def test_every_pair_compares_as_compare_does_on_the_runs_sheets() -> None:
    """A pairing's comparison is `compare`'s on the two runs' sheets, with the options
    passed on; graded scores (a paired bootstrap) and pass/fail ones alike."""
    a = run([1.0, 0.5, 0.0, 1.0] * 8)
    b = run([0.5, 1.0, 1.0, 0.0] * 8)
    sheets = (a.sheet(SCORER), b.sheet(SCORER))
    (plain,) = every_pair([("a", a), ("b", b)])
    assert plain.comparison == compare(*sheets, SCORER, labels=("a", "b"))
    (passed,) = every_pair([("a", a), ("b", b)], threshold=0.5, confidence=0.9, method="exact")
    expected = compare(
        *sheets, SCORER, labels=("a", "b"), threshold=0.5, confidence=0.9, method="exact"
    )
    assert passed.comparison == expected and expected != plain.comparison
