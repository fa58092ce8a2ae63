"""The leaderboard's pairs carry the minimum detectable effect of their comparison."""

from gradetrail_assets.leaderboard import _pair
from gradetrail_lib.analysis.pairwise import Pairing
from gradetrail_lib.analysis.stats.paired import compare
from gradetrail_lib.analysis.stats.power import minimum_detectable_effect
from tests.support.traces import record


def test_a_no_winner_pair_has_its_minimum_detectable_effect() -> None:
    a = [record(f"s{i:02d}", 1.0 if i < 23 else 0.0) for i in range(50)]
    b = [record(f"s{i:02d}", 1.0 if i < 27 else 0.0) for i in range(50)]
    comparison = compare(a, b, "s")
    pairing = Pairing(label_a="m-a", label_b="m-b", scorer="s", comparison=comparison, refused=None)
    pair = _pair(pairing)
    assert pair["verdict"] == "no winner"
    assert pair["minimum_detectable_effect"] == minimum_detectable_effect(50, 4 / 50)
