"""Which scorers two runs can be paired on, for `compare` and `gate`.

Two runs are paired scorer by scorer: a scorer both runs have (same name) is compared
when its hash and the dataset hash match (or `--force`); a scorer one run lacks is
reported as not compared, never scored as all-failures.
"""

from dataclasses import dataclass

from gradetrail_lib.errors import NotComparable, UsageError
from gradetrail_lib.results.trace import Manifest


@dataclass(frozen=True)
class ScorerPair:
    """A scorer name and where it is: in both runs, or in one (`missing_from` the other)."""

    name: str
    primary_a: bool
    primary_b: bool
    # Where it is missing: "" when both runs have it, else the side ("A") without it.
    missing_from: str
    sides: tuple[str, str] = ("A", "B")  # how the runs are called: A/B, baseline/candidate
    labels: tuple[str, str] = ("A", "B")

    @property
    def shared(self) -> bool:
        return not self.missing_from

    @property
    def role(self) -> str:
        """`primary`, `primary of A`, ... or "" for a secondary scorer."""
        if self.primary_a and self.primary_b:
            return "primary"
        if self.primary_a or self.primary_b:
            return f"primary of {self.sides[0] if self.primary_a else self.sides[1]}"
        return ""

    @property
    def title(self) -> str:
        return f"{self.name} ({self.role})" if self.role else self.name

    @property
    def only_in(self) -> str:
        """`scorer 'x' is only in B [label]` (for a scorer one run lacks)."""
        at = 1 if self.missing_from == self.sides[0] else 0
        return f"scorer {self.name!r} is only in {self.sides[at]} [{self.labels[at]}]"


def scorer_pairs(
    a: Manifest,
    b: Manifest,
    labels: tuple[str, str],
    *,
    sides: tuple[str, str] = ("A", "B"),
    first: str = "a",
) -> list[ScorerPair]:
    """Every scorer of either run: the `first` run's in its order (primary first), then
    the other's own."""
    names_a, names_b = a.scorer_names, b.scorer_names
    lead, follow = (names_a, names_b) if first == "a" else (names_b, names_a)
    ordered = lead + [n for n in follow if n not in lead]

    def missing_from(name: str) -> str:
        if name not in names_b:
            return sides[1]
        return sides[0] if name not in names_a else ""

    return [
        ScorerPair(
            name,
            name == a.primary_scorer,
            name == b.primary_scorer,
            missing_from(name),
            sides,
            labels,
        )  # fmt: skip
        for name in ordered
    ]


def pick(pairs: list[ScorerPair], name: str) -> ScorerPair:
    """The scorer `--scorer NAME` names: an error (exit 2) unless both runs have it."""
    for pair in pairs:
        if pair.name == name:
            if not pair.shared:
                raise NotComparable(f"{pair.only_in}: there is nothing to pair it with")
            return pair
    listed = ", ".join(p.name for p in pairs)
    raise UsageError(f"--scorer: no scorer {name!r} in either run (scorers: {listed})")


def dataset_differs(a: Manifest, b: Manifest) -> bool:
    return a.dataset.hash != b.dataset.hash
