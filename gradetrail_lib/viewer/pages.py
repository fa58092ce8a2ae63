"""Every page of the viewer as (status, HTML), from a `Catalog` and the query
parameters: the runs, a run's samples, a sample, the diff of two runs, an error.

The state of a view is its URL: each page reads its filters, sort, search and page
number from the query and writes every link and form from the same state, leaving
out what is at its default, so a view has one URL (links.py has the contract). Pages
are rendered with the HTML report's jinja2 environment (autoescape, its filters) and
its sample macro; the viewer's own templates come first.
"""

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2
import numpy as np

from gradetrail_lib.analysis.calibration import run_calibrations
from gradetrail_lib.analysis.stats import PairedComparison, check_comparable, compare
from gradetrail_lib.analysis.stats.intervals import Estimate, Interval
from gradetrail_lib.analysis.stats.run_stats import percent
from gradetrail_lib.analysis.summary import RunSummary, format_cost
from gradetrail_lib.errors import GradetrailError, InputError, NotComparable
from gradetrail_lib.history.entries import FileHistory, HistoryEntry, HistoryStore
from gradetrail_lib.report.html import (
    FAILURE_LABELS,
    FailedSample,
    environment,
    reproducibility_facts,
    sample_view,
)
from gradetrail_lib.report.media import media_files
from gradetrail_lib.report.svg import ForestRow, HistoryPoint, forest_plot, history_plot
from gradetrail_lib.results.runs import Run, distinct_labels
from gradetrail_lib.results.text import visible
from gradetrail_lib.results.trace import FAILURE_MODES, OUTCOMES, Manifest, TraceRecord
from gradetrail_lib.viewer import links
from gradetrail_lib.viewer.catalog import Catalog, RunEntry, damage_flags, flags_of
from gradetrail_lib.viewer.index import Query, RunIndex, sort_keys
from gradetrail_lib.viewer.labelling import LabelDesk, LabelForm, whole_hash
from gradetrail_lib.viewer.paths import NotFound
from gradetrail_lib.viewer.reference import DatasetShelf

PER_PAGE = 50
MAX_PER_PAGE = 500
PREVIEW = 160
# Characters of any one text (a response, a message, a judge's output) a page holds; a
# longer one is cut with a marker, and its sample page links to the record in full.
TEXT_CAP = 20_000
COMPARISONS = 16
RUN_SORTS = ("spec", "model", "identity", "n", "pass", "cost", "cache", "date", "flags")
Paired = tuple[PairedComparison, Any]  # the comparison; A's position -> B's


class BadRequest(ValueError):
    """A query parameter the page cannot honour (400, with the reason)."""


@dataclass(frozen=True)
class Page:
    status: int
    html: str = ""
    location: str | None = None  # a redirect (303)
    media_type: str = "text/html"


def viewer_css() -> str:
    """The report's style sheet, then the viewer's own."""
    lib = resources.files("gradetrail_lib")
    base = (lib / "report" / "templates" / "base.css").read_text(encoding="utf-8")
    own = (lib / "viewer" / "static" / "viewer.css").read_text(encoding="utf-8")
    return base + "\n" + own


# -- query parameters ----------------------------------------------------------------
def _flag(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "")
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise BadRequest(f"{name}: expected 1 or 0, not {value!r}")


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name, "")
    if value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name}: not a number: {value!r}") from None
    if not low <= number <= high:
        raise BadRequest(f"{name}: must be between {low} and {high}, not {number}")
    return number


def _choice(params: Mapping[str, str], name: str, allowed: Sequence[str]) -> str:
    value = params.get(name, "")
    if value and value not in allowed:
        raise BadRequest(f"{name}: {value!r} is not one of {', '.join(a for a in allowed if a)}")
    return value


@dataclass(frozen=True)
class Pager:
    total: int
    page: int
    per: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per))

    @property
    def start(self) -> int:
        return (self.page - 1) * self.per

    @property
    def stop(self) -> int:
        return min(self.start + self.per, self.total)


def _pager(params: Mapping[str, str], total: int, per_default: int) -> Pager:
    per = _int(params, "per", per_default, 1, MAX_PER_PAGE)
    pages = max(1, math.ceil(total / per))
    page = _int(params, "page", 1, 1, 10**9)
    return Pager(total, min(page, pages), per)


@dataclass(frozen=True)
class State:
    """A page's parameters, for writing its links: `href(page=2)` is this view on page 2,
    `href(sort="id", page=None)` sorted by id from the first page."""

    path: str
    params: dict[str, str | int | None]

    def href(self, **changes: str | int | None) -> str:
        merged = {**self.params, **changes}
        if merged.get("page") == 1:
            merged["page"] = None
        return self.path + links.query(merged)

    def sort_href(self, key: str) -> str:
        """Sorting by `key`, or by `key` descending when it is the current sort."""
        current = str(self.params.get("sort") or "")
        return self.href(sort=f"-{key}" if current == key else key, page=None)


# -- views ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoreCell:
    scorer: str
    score: float | None
    passed: bool
    error: str | None


@dataclass(frozen=True)
class SampleRow:
    position: int
    id: str
    repeat: int
    href: str
    cells: list[ScoreCell]
    outcome: str
    failure_mode: str | None
    failing: bool
    preview: str
    view: FailedSample | None = None  # in the failures view: the sample in full
    damage: str | None = None  # a line that is not a record: its error


@dataclass(frozen=True)
class DiffSide:
    record: TraceRecord
    href: str
    cell: ScoreCell
    cells: list[ScoreCell]


@dataclass(frozen=True)
class DiffRow:
    id: str
    repeat: int
    a: DiffSide
    b: DiffSide
    same_response: bool


def _cells(record: TraceRecord, scorers: Sequence[str], threshold: float) -> list[ScoreCell]:
    return [
        ScoreCell(s, record.score_of(s), record.passes(s, threshold), record.error_of(s))
        for s in scorers
    ]


def _preview(record: TraceRecord) -> str:
    if record.response is None:
        return ""
    # Only the start is looked at: a preview of a huge response costs what a short one does.
    text = " ".join(record.response[: PREVIEW * 8].split())
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def _when(iso: str) -> str:
    """`2026-05-01T02:00:13.5+00:00` as `2026-05-01 02:00`."""
    return iso[:16].replace("T", " ") if len(iso) >= 16 else iso


class Pages:
    def __init__(
        self, catalog: Catalog, desk: LabelDesk | None = None, history: HistoryStore | None = None
    ) -> None:
        self.catalog = catalog
        # The run history of the plots: the file under the root, or a shared store.
        self.history = history or FileHistory(catalog.root)
        # With `view --labels`: the sample and failures pages carry label forms.
        self.desk = desk
        # The runs' dataset files, for each sample's reference (reference.py).
        self.datasets = DatasetShelf()
        self.env = environment(jinja2.PackageLoader("gradetrail_lib.viewer", "templates"))
        self.env.filters["when"] = _when
        self.env.filters["cost"] = format_cost
        self.env.globals.update(
            runs_href=links.runs_href,
            run_href=links.run_href,
            sample_href=links.sample_href,
            diff_href=links.diff_href,
            label_href=links.label_href,
            failure_labels=FAILURE_LABELS,
            root=str(catalog.root),
            # Label forms need the browser to send the viewer's own Origin (labelling.py).
            referrer_policy="same-origin" if desk is not None else "no-referrer",
            labelling=desk is not None,
        )
        self._comparisons: OrderedDict[tuple[Any, ...], Paired | NotComparable] = OrderedDict()
        self._lock = threading.Lock()

    def render(self, template: str, status: int = 200, **context: Any) -> Page:
        return Page(status, self.env.get_template(template).render(**context))

    def error(self, status: int, title: str, message: str = "") -> Page:
        return self.render("page_error.html.j2", status, title=title, message=message)

    def handle(self, build: Callable[..., Page], *args: Any) -> Page:
        """`build(*args)`, with the viewer's errors as pages: 404 for what is not there
        (or refused), 400 for a bad parameter, 422 for a run that cannot be read, 409
        for two runs that cannot be paired."""
        try:
            return build(*args)
        except NotFound:
            return self.error(404, "Not found")
        except BadRequest as exc:
            return self.error(400, "Bad request", str(exc))
        except InputError as exc:
            return self.error(422, "This run cannot be read", self._relative(str(exc)))
        except NotComparable as exc:
            return self.error(409, "These runs cannot be paired", str(exc))

    def _relative(self, message: str) -> str:
        return message.replace(str(self.catalog.root) + "/", "")

    # -- / -----------------------------------------------------------------------------
    def runs(self, params: Mapping[str, str]) -> Page:
        entries = self.catalog.entries()
        good = [e for e in entries if e.run is not None]
        errors = [e for e in entries if e.run is None]
        specs = sorted({e.spec for e in good})
        models = sorted({e.model for e in good})
        spec = _choice(params, "spec", ["", *specs])
        model = _choice(params, "model", ["", *models])
        sort = _choice(params, "sort", ["", *RUN_SORTS, *(f"-{s}" for s in RUN_SORTS)])
        shown = [
            e for e in good if (not spec or e.spec == spec) and (not model or e.model == model)
        ]
        # The plots' scorer: any scorer of the runs shown (a spec without it plots its
        # primary); by default each spec's primary.
        scorers = sorted({s for e in shown if e.run for s in e.run.manifest.scorer_names})
        scorer = _choice(params, "scorer", ["", *scorers])
        shown = _sort_runs(shown, sort or "-date")
        state = State("/", {"spec": spec, "model": model, "sort": sort, "scorer": scorer})
        return self.render(
            "page_runs.html.j2",
            entries=shown,
            errors=errors,
            specs=specs,
            models=models,
            spec=spec,
            model=model,
            sort=sort or "-date",
            state=state,
            scorers=scorers,
            scorer=scorer,
            plots=_plots(shown, _history(self.history), scorer, self._rate),
            groups=_pairing_groups(good),
        )

    def _rate(self, entry: RunEntry, scorer: str) -> Estimate | None:
        """A listed run's pass rate on `scorer`; None when it has no such scorer."""
        if entry.run is None or scorer not in entry.run.manifest.scorer_names:
            return None
        if scorer == entry.run.manifest.primary_scorer and entry.pass_rate is not None:
            return entry.pass_rate
        return self.catalog.pass_rate(entry.name, entry.run, scorer)

    # -- /run/<name> ---------------------------------------------------------------------
    def run(self, name: str, params: Mapping[str, str]) -> Page:
        with self.catalog.samples(name) as (run, index, source):
            m = run.manifest
            scorers = m.scorer_names
            failures = _flag(params, "failures")
            scorer = _choice(params, "scorer", ["", *scorers]) or None
            outcome = _choice(params, "outcome", ["", *OUTCOMES]) or None
            mode = _choice(params, "mode", ["", "none", *FAILURE_MODES]) or None
            text = params.get("q", "")
            sort = _choice(params, "sort", sort_keys(scorers))
            query = Query(failures, scorer, outcome, mode, text, sort)
            try:
                selected = index.select(query, source)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            pager = _pager(params, len(selected), PER_PAGE)
            positions = [int(p) for p in selected[pager.start : pager.stop]]
            readable = [p for p in positions if p not in index.damage]
            records = dict(zip(readable, index.read(source, readable, TEXT_CAP), strict=True))
            failing = index.failing()
            rows = [
                self._row(name, run, index, p, records[p], bool(failing[p]), full=failures)
                if p in records
                else self._damaged_row(name, run, index, p)
                for p in positions
            ]
            by_outcome, by_mode = index.counts()
            state = State(
                links.run_href(name),
                {
                    "failures": 1 if failures else None, "scorer": scorer, "outcome": outcome,
                    "mode": mode, "q": text, "sort": sort,
                    "per": pager.per if "per" in params else None, "page": pager.page,
                },
            )  # fmt: skip
            forms: list[LabelForm | None] = []
            if self.desk is not None and failures:
                lookup = self.desk.lookup()
                forms = [
                    self.desk.form(
                        name, m.spec.name, records[p], via="page", lookup=lookup,
                        sha=whole_hash(index, source, p, records[p], TEXT_CAP),
                        back=f"{state.href()}#sample-{p}",
                    )
                    if p in records
                    else None
                    for p in positions
                ]  # fmt: skip
            return self.render(
                "page_run.html.j2",
                name=name,
                run=m,
                # The run's own summary (its manifest's), as every surface reads it.
                summary=RunSummary.of(m),
                label=m.label,
                flags=flags_of(name, run) + damage_flags(index, self.catalog.root),
                facts=reproducibility_facts(m),
                rates=[(s, index.pass_rate(s)) for s in scorers],
                confidence=percent(0.95),
                scorers=scorers,
                outcomes=by_outcome,
                modes=by_mode,
                failing_total=int(failing.sum()),
                query=query,
                state=state,
                pager=pager,
                rows=rows,
                forms=forms,
                others=self._others(name, m),
                repeats=index.clustered,
                threshold=index.threshold,
                calibrations=run_calibrations(run.path) if run.path is not None else [],
            )

    def _row(
        self, name: str, run: Run, index: RunIndex, position: int, record: TraceRecord,
        failing: bool, *, full: bool,
    ) -> SampleRow:  # fmt: skip
        primary = run.manifest.primary_scorer
        return SampleRow(
            position=position,
            id=record.id,
            repeat=record.repeat,
            href=links.sample_href(name, record.id, record.repeat),
            cells=_cells(record, run.manifest.scorer_names, index.threshold),
            outcome=record.outcome,
            failure_mode=record.failure_mode,
            failing=failing,
            preview=_preview(record),
            view=sample_view(record, primary, index.threshold, f"s{position}") if full else None,
        )

    def _damaged_row(self, name: str, run: Run, index: RunIndex, position: int) -> SampleRow:
        sample_id, repeat = index.ids[position], int(index.repeats[position])
        return SampleRow(
            position=position,
            id=sample_id,
            repeat=repeat,
            href=links.sample_href(name, sample_id, repeat),
            cells=[ScoreCell(s, None, False, None) for s in run.manifest.scorer_names],
            outcome="damaged",
            failure_mode=None,
            failing=True,
            preview="",
            damage=self._relative(index.damage[position]),
        )

    def _others(self, name: str, manifest: Manifest) -> list[RunEntry]:
        """The other runs the diff form offers: those that pair with this one (`pairs`),
        the same spec's first, newest first. Any other would answer 409."""
        entries = self.catalog.entries(rates=False)
        others = [
            e
            for e in entries
            if e.run is not None and e.name != name and pairs(manifest, e.run.manifest)
        ]
        others.sort(key=lambda e: e.finished_at, reverse=True)
        return sorted(others, key=lambda e: e.spec != manifest.spec.name)

    # -- /run/<name>/sample/<id> -------------------------------------------------------
    def sample(self, name: str, sample_id: str, params: Mapping[str, str]) -> Page:
        repeat = _int(params, "repeat", 0, 0, 10**9)
        with self.catalog.samples(name) as (run, index, source):
            position = index.find(sample_id, repeat)
            if position is None:
                raise NotFound(sample_id)
            if position in index.damage:
                return self.error(
                    422, "This sample cannot be read", self._relative(index.damage[position])
                )
            if _flag(params, "raw"):  # bidi controls as JSON escapes: the same JSON
                text = visible(index.raw(source, position).decode("utf-8", "replace"))
                return Page(200, text, media_type="text/plain; charset=utf-8")
            (record,) = index.read(source, [position], TEXT_CAP)
            neighbours = {}
            for label, p in (("previous", position - 1), ("next", position + 1)):
                if 0 <= p < index.n:
                    neighbours[label] = links.sample_href(name, index.ids[p], int(index.repeats[p]))
            repeats = [
                r for r in range(run.manifest.repeats) if index.find(sample_id, r) is not None
            ]
            primary = run.manifest.primary_scorer
            form = None
            if self.desk is not None:
                here = links.sample_href(name, record.id, record.repeat)
                sha = whole_hash(index, source, position, record, TEXT_CAP)
                form = self.desk.form(
                    name, run.manifest.spec.name, record, sha=sha, via="page", back=here
                )
            return self.render(
                "page_sample.html.j2",
                form=form,
                reference=self.datasets.reference(run.manifest, record.id, TEXT_CAP),
                name=name,
                label=run.manifest.label,
                record=record,
                view=sample_view(
                    record, primary, index.threshold, "sample", media_files(run.manifest)
                ),
                failing=bool(index.failing()[position]),
                cells=_cells(record, run.manifest.scorer_names, index.threshold),
                primary=primary,
                neighbours=neighbours,
                repeats=repeats if len(repeats) > 1 else [],
                position=position,
                total=index.n,
                raw=links.sample_raw_href(name, sample_id, repeat),
                cut=int(index.lengths[position]) > TEXT_CAP,
                cap=TEXT_CAP,
            )

    # -- /diff -------------------------------------------------------------------------
    def diff_form(self, params: Mapping[str, str]) -> Page:
        """The runs page's and run page's diff form (two selects, no script) lands here."""
        a, b = params.get("a", ""), params.get("b", "")
        if not a or not b:
            raise BadRequest("choose two runs (a and b)")
        return Page(303, location=links.diff_href(a, b))

    def diff(self, name_a: str, name_b: str, params: Mapping[str, str]) -> Page:
        with (
            self.catalog.samples(name_a) as (run_a, index_a, source_a),
            self.catalog.samples(name_b) as (run_b, index_b, source_b),
        ):
            ma, mb = run_a.manifest, run_b.manifest
            label_a, label_b = distinct_labels([run_a, run_b])
            if label_a == label_b:
                label_a, label_b = name_a, name_b
            labels = (label_a, label_b)
            shared = [s for s in ma.scorer_names if s in mb.scorer_names]
            if not shared:
                raise NotComparable(
                    f"the runs share no scorer: A [{label_a}] has {', '.join(ma.scorer_names)}; "
                    f"B [{label_b}] has {', '.join(mb.scorer_names)}"
                )
            scorer = _choice(params, "scorer", ["", *shared]) or shared[0]
            every = _flag(params, "all")
            try:
                check_comparable(ma, mb, scorer, labels=labels)
                refused = None
            except NotComparable as exc:
                # The page's sentence says it would refuse and ends with its own full stop.
                refused = str(exc).removeprefix("refusing to compare: ").rstrip(".")
            comparison, b_of_a = self._paired(
                (index_a.signature, index_b.signature, scorer, labels),
                lambda: _pair(index_a, index_b, ma, mb, scorer, labels),
            )
            disagree = _disagreements(index_a, index_b, b_of_a, scorer)
            chosen = np.arange(index_a.n) if every else np.flatnonzero(disagree)
            pager = _pager(params, len(chosen), PER_PAGE)
            page_a = [int(p) for p in chosen[pager.start : pager.stop]]
            page_b = [int(b_of_a[p]) for p in page_a]
            rows = []
            for pa, pb, ra, rb in zip(
                page_a,
                page_b,
                index_a.read(source_a, page_a, TEXT_CAP),
                index_b.read(source_b, page_b, TEXT_CAP),
                strict=True,
            ):
                same = ra.response == rb.response
                if same and max(index_a.lengths[pa], index_b.lengths[pb]) > TEXT_CAP:
                    # Cut texts agree on their start only: compare the whole responses.
                    same = index_a.response_of(source_a, pa) == index_b.response_of(source_b, pb)
                rows.append(
                    DiffRow(
                        ra.id, ra.repeat,
                        self._side(name_a, ra, scorer, shared, index_a.threshold),
                        self._side(name_b, rb, scorer, shared, index_b.threshold),
                        same,
                    )
                )  # fmt: skip
            state = State(
                links.diff_href(name_a, name_b),
                {
                    "all": 1 if every else None,
                    "scorer": scorer if scorer != shared[0] else None,
                    "per": pager.per if "per" in params else None,
                    "page": pager.page,
                },
            )
            return self.render(
                "page_diff.html.j2",
                name_a=name_a,
                name_b=name_b,
                label_a=label_a,
                label_b=label_b,
                scorer=scorer,
                shared=shared,
                every=every,
                comparison=comparison,
                refused=refused,
                disagreements=int(disagree.sum()),
                total=index_a.n,
                rows=rows,
                pager=pager,
                state=state,
            )

    def _side(
        self, name: str, record: TraceRecord, scorer: str, shared: list[str], threshold: float
    ) -> DiffSide:
        cells = _cells(record, shared, threshold)
        cell = next(c for c in cells if c.scorer == scorer)
        return DiffSide(record, links.sample_href(name, record.id, record.repeat), cell, cells)

    def _paired(self, key: tuple[Any, ...], build: Callable[[], Paired]) -> Paired:
        """A pairing is kept while both files are unchanged (its bootstrap takes seconds
        at 100,000 pairs), and so is a refusal."""
        with self._lock:
            found = self._comparisons.get(key)
        if found is None:
            try:
                found = build()
            except NotComparable as exc:
                found = exc
            with self._lock:
                self._comparisons[key] = found
                while len(self._comparisons) > COMPARISONS:
                    self._comparisons.popitem(last=False)
        if isinstance(found, NotComparable):
            raise found
        return found


def _pairing_key(m: Manifest) -> tuple[str, int, int]:
    return (m.dataset.hash, m.samples, m.repeats)


def _pairing_groups(entries: Sequence[RunEntry]) -> list[tuple[str, list[str]]]:
    """The runs page's diff form: the runs by what pairing needs of them (dataset,
    samples, repeats; `pairs`), each group labelled, so two runs of one group are what
    to pick (two of different groups answer 409)."""
    groups: dict[tuple[str, int, int], list[RunEntry]] = {}
    for e in sorted(entries, key=lambda e: e.name):
        if e.run is not None:
            groups.setdefault(_pairing_key(e.run.manifest), []).append(e)
    out = []
    for (dataset, samples, repeats), members in groups.items():
        specs = ", ".join(sorted({e.spec for e in members}))
        times = f" × {repeats} repeats" if repeats > 1 else ""
        label = f"{specs}: {samples} samples{times}, dataset {dataset[:8]}"
        out.append((label, [e.name for e in members]))
    return sorted(out, key=lambda group: len(group[1]) < 2)  # groups that pair first


def pairs(a: Manifest, b: Manifest) -> bool:
    """Whether the diff of two runs can pair their samples (else it answers 409): the same
    dataset (so the same sample ids), the same number of repeats, and a scorer in common.
    A scorer whose hash differs still pairs: the diff shows what `compare --force` gives."""
    return _pairing_key(a) == _pairing_key(b) and not set(a.scorer_names).isdisjoint(b.scorer_names)


def _pair(
    a: RunIndex, b: RunIndex, ma: Manifest, mb: Manifest, scorer: str, labels: tuple[str, str]
) -> Paired:
    """`compare` on the two indexes (NotComparable when their samples differ, with the
    counts per side), and where each of A's samples is in B."""
    # (Forced, the check only makes notes: a different sample set is compare's refusal.)
    notes = check_comparable(ma, mb, scorer, force=True, labels=labels)
    comparison = compare(a.sheet(scorer), b.sheet(scorer), scorer, labels=labels, notes=notes)
    b_of_a = np.array(
        [b.positions[(i, r)] for i, r in zip(a.ids, a.repeats.tolist(), strict=True)],
        dtype=np.int64,
    )
    return comparison, b_of_a


def _disagreements(a: RunIndex, b: RunIndex, b_of_a: Any, scorer: str) -> Any:
    """Pairs that differ on `scorer`: pass or fail, score, or scored or not."""
    score_a, score_b = a.scores[scorer], b.scores[scorer][b_of_a]
    scored_a, scored_b = ~np.isnan(score_a), ~np.isnan(score_b)
    value_a, value_b = np.nan_to_num(score_a), np.nan_to_num(score_b)
    passes_a, passes_b = a.passes(scorer), b.passes(scorer)[b_of_a]
    return (passes_a != passes_b) | (value_a != value_b) | (scored_a != scored_b)


def _sort_runs(entries: list[RunEntry], sort: str) -> list[RunEntry]:
    descending, key = sort.startswith("-"), sort.lstrip("-")

    def value(e: RunEntry) -> Any:
        assert e.run is not None
        m = e.run.manifest
        rate = e.pass_rate.value if e.pass_rate is not None else None
        return {
            "spec": e.spec,
            "model": e.model,
            "identity": m.identity,
            "n": m.samples,
            "pass": -1.0 if rate is None else rate,
            "cost": -1.0 if m.target.cost_usd is None else m.target.cost_usd,
            "cache": m.target.cache_hits,
            "date": m.finished_at,
            "flags": len(e.flags) + len(m.warnings),
        }[key]

    return sorted(entries, key=lambda e: (value(e), e.name), reverse=descending)


@dataclass
class SpecPlots:
    spec: str
    scorer: str
    forest: Any
    histories: list[Any] = field(default_factory=list)


def _history(store: HistoryStore) -> list[HistoryEntry]:
    """The run history (every completed run, also those a later run of the same identity
    replaced); empty when there is none or it cannot be read (a shared store out of
    reach included: the page still shows the directories)."""
    try:
        return store.read()
    except GradetrailError:
        return []


def _estimate(entry: HistoryEntry) -> Estimate | None:
    rate = entry.pass_rate
    if rate.value is None or rate.low is None or rate.high is None:
        return None
    return Estimate(
        rate.value, rate.n, Interval(rate.low, rate.high, rate.confidence, rate.method),
        rate.passed, rate.cases,
    )  # fmt: skip


def recorded_points(entries: Sequence[HistoryEntry], here: set[str]) -> list[HistoryPoint]:
    """One point per run of the history (oldest first), but one for a row of runs with the
    same identity and the same results (a re-run answered from the cache, a Dagster
    re-materialization): they measured nothing new. Its point is the row's last run, and
    its tooltip says how many runs it stands for."""
    rows: list[list[HistoryEntry]] = []
    for entry in sorted(entries, key=lambda h: h.finished):
        last = rows[-1][-1] if rows else None
        same = last is not None and (last.identity, last.fingerprint) == (
            entry.identity, entry.fingerprint,
        )  # fmt: skip
        if same:
            rows[-1].append(entry)
        else:
            rows.append([entry])
    points = []
    for row in rows:
        entry = row[-1]
        estimate = _estimate(entry)
        if estimate is None:
            continue
        note = f"{entry.run_dir}, {entry.primary_scorer}"
        if len(row) > 1:
            note += f"; {len(row)} runs with the same results (first {_when(row[0].finished_at)})"
        href = links.run_href(entry.run_dir) if entry.run_dir in here else None
        points.append(HistoryPoint(entry.finished_at, estimate, href, note))
    return points


def _plots(
    entries: list[RunEntry],
    recorded_runs: list[HistoryEntry] | None = None,
    scorer: str = "",
    rate_of: Callable[[RunEntry, str], Estimate | None] | None = None,
) -> list[SpecPlots]:
    """Per spec, each model's latest run in a forest plot; per spec and model with more
    than one run, the pass rate over the runs, oldest first. The scorer is `scorer` where
    a spec has it, else the spec's primary (`rate_of(entry, scorer)` gives a run's rate;
    by default its primary one). The primary's history comes from the run history when it
    has two runs or more (a nightly re-run of one identity replaces its directory); any
    other scorer's, and the primary's without a history, from the directories."""
    past = recorded_runs or []
    here = {e.name for e in entries}
    out = []
    for spec in sorted({e.spec for e in entries}):
        runs = sorted((e for e in entries if e.spec == spec), key=lambda e: e.finished_at)
        latest = runs[-1].run
        primary = latest.manifest.primary_scorer if latest else ""
        names = {s for e in runs if e.run is not None for s in e.run.manifest.scorer_names}
        shown = scorer if scorer in names else primary

        def rate(e: RunEntry, shown: str = shown) -> Estimate | None:
            if rate_of is not None:
                return rate_of(e, shown)
            return e.pass_rate if e.run and e.run.manifest.primary_scorer == shown else None

        by_model: dict[str, list[RunEntry]] = {}
        for e in runs:
            by_model.setdefault(e.model, []).append(e)
        rows = []
        for model, history in sorted(by_model.items()):
            last = next((e for e in reversed(history) if rate(e) is not None), None)
            if last is None:
                continue
            estimate = rate(last)
            assert estimate is not None
            rows.append(
                ForestRow(
                    model, estimate, links.run_href(last.name),
                    f"{shown}, {last.name}, {_when(last.finished_at)}",
                )
            )  # fmt: skip
        plots = SpecPlots(
            spec,
            shown,
            forest_plot(rows, title=f"{spec}: {shown} pass rate per model (latest run), 95% CI"),
        )
        for model, runs_of_model in sorted(by_model.items()):
            recorded = recorded_points(
                [
                    h
                    for h in past
                    if h.spec == spec and h.model == model and h.primary_scorer == shown
                ],
                here,
            )
            if len(recorded) >= 2:
                title = f"{model}: {shown} pass rate over {len(recorded)} runs (run history)"
                plots.histories.append(history_plot(recorded, title=title))
                continue
            points = [
                HistoryPoint(e.finished_at, estimate, links.run_href(e.name), f"{e.name}, {shown}")
                for e in runs_of_model
                if (estimate := rate(e)) is not None
            ]
            if len(points) < 2:
                continue
            plots.histories.append(
                history_plot(points, title=f"{model}: {shown} pass rate over {len(points)} runs")
            )
        out.append(plots)
    return out
