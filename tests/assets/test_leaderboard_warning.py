"""The leaderboard prints a paired difference's warning beside its interval, and keeps
it in the board's JSON."""

from gradetrail_assets.leaderboard import leaderboard_metadata

WARNING = "3.0 effective differences over 12 pairs: a paired bootstrap of graded scores..."


def board(warning: str | None) -> dict[str, object]:
    model = {"model": "m", "passed": 6, "n": 12, "pass_rate": 0.5, "pass_low": 0.25,
             "pass_high": 0.75, "others": {}}  # fmt: skip
    pair = {"a": "m", "b": "n", "scorer": "s", "n": 12, "difference": 0.05, "low": -0.1,
            "high": 0.2, "warning": warning, "paired_test": "sign-flip", "paired_p": 1.0,
            "verdict": "no winner", "winner": None}  # fmt: skip
    return {"primary": "s", "scorers": ["s"], "models": [model], "pairs": [pair]}


def test_the_leaderboard_shows_a_pairs_warning() -> None:
    table = leaderboard_metadata(board(WARNING))["leaderboard"].value
    assert f"(-0.100–0.200, n=12; warning: {WARNING}) |" in table
    plain = leaderboard_metadata(board(None))["leaderboard"].value
    assert "(-0.100–0.200, n=12) |" in plain and "warning" not in plain
