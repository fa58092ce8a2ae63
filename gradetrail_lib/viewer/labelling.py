"""Human labels from the viewer (`gradetrail view --labels`): the labelling queue, the
Pass / Fail buttons on the sample and failures pages, and the one route that writes.

Off by default: without `--labels` the viewer has no form that posts and every route is
a read. With it, each label form carries a per-process secret token, and a post is
refused (403, nothing written) unless the token matches and the request comes from the
viewer's own page: its `Host` is the address the viewer listens on and its `Origin`
(or, without one, its `Referer`) is that same origin. Pages with label forms are served
with `Referrer-Policy: same-origin`, so the browser sends the viewer's own origin on
its own forms and `null` on any other site's. The only file written is the labels file
(`<results>/.labels.jsonl`, through the label store).

The queue (`/label/<run>?seed=N`) is a random order of the run's answered samples,
stratified by the judge's verdict with proportional allocation: every prefix of the
queue holds judged-pass and judged-fail samples in the run's own proportions (to within
one), shuffled within each group by the seed. So labelling any first k gives both kinds
of the judge's error from the start, and the labelled set stays a self-weighting random
sample of the run, which is what the corrected pass rate needs (equal numbers from each
group would over-weight the rarer verdict and bias it). Labels made in the queue are
`random`; labels from the sample and failures pages are `selected`. The queue hides the
judges' verdicts, so a labeller is not anchored on them.
"""

import hmac
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from gradetrail_lib.errors import InputError
from gradetrail_lib.labels.store import (
    Label,
    LabelKey,
    LabelLookup,
    append_labels,
    label_for,
    labels_path,
    read_labels,
    response_hash,
)
from gradetrail_lib.results.trace import Manifest, TraceRecord
from gradetrail_lib.viewer import links
from gradetrail_lib.viewer.index import RunIndex, signature

MAX_BODY = 64 * 1024
MAX_NOTE = 4000
MAX_SEED = 2**32 - 1
FIELDS = ("token", "id", "repeat", "sha", "label", "note", "via", "back", "seed")
VERDICTS = ("pass", "fail", "skip")


class Refused(Exception):
    """A post that is not the viewer's own (403): nothing is written."""


class BadLabel(ValueError):
    """A post whose fields cannot make a label (400 or, with `status`, 404/409/422)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# -- the queue -----------------------------------------------------------------------
def stratified_order(judged_pass: Sequence[bool], seed: int) -> list[int]:
    """Positions 0..n-1 in a seeded random order, stratified by `judged_pass` with
    proportional allocation (see the module docstring): after k positions, each group
    has had round(k * its share) of them, to within one."""
    verdicts = np.asarray(judged_pass, dtype=np.bool_)
    rng = np.random.default_rng(seed)
    groups = [rng.permutation(np.flatnonzero(~verdicts)), rng.permutation(np.flatnonzero(verdicts))]
    n = len(verdicts)
    taken = [0, 0]
    out: list[int] = []
    for k in range(1, n + 1):
        # The group furthest behind its share; a tie goes to the smaller group.
        deficits = [k * len(g) / n - t for g, t in zip(groups, taken, strict=True)]
        pick = 0 if (deficits[0], -len(groups[0])) >= (deficits[1], -len(groups[1])) else 1
        if taken[pick] >= len(groups[pick]):
            pick = 1 - pick
        out.append(int(groups[pick][taken[pick]]))
        taken[pick] += 1
    return out


def judge_of(manifest: Manifest) -> str:
    """The scorer the queue stratifies on: the run's first judge, else its primary."""
    judges = [s.name for s in manifest.scorers if s.type == "judge"]
    return judges[0] if judges else manifest.primary_scorer


def answered_positions(index: RunIndex) -> list[int]:
    """The samples that can be labelled: those with a response (a label is about one)."""
    return [int(p) for p in np.flatnonzero(index.answered)]


# -- the post --------------------------------------------------------------------------
def form_fields(body: bytes, content_type: str) -> dict[str, str]:
    """An urlencoded form body as one value per field; BadLabel on anything else."""
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        raise BadLabel("expected a form (application/x-www-form-urlencoded)")
    if len(body) > MAX_BODY:
        raise BadLabel(f"the form is over {MAX_BODY} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise BadLabel("the form is not UTF-8 url-encoded") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        if key not in FIELDS:
            raise BadLabel(f"unknown field {key!r}")
        if key in out:
            raise BadLabel(f"field {key!r} given twice")
        out[key] = value
    return out


def own_hosts(names: Iterable[str], server: tuple[str, int] | None) -> set[str]:
    """The Host values that name this viewer: each of its host names (app.host_names:
    the address it listens on, and `localhost` for a loopback address) with its port."""
    if server is None:
        return set()
    return {f"{name}:{server[1]}" for name in names}


def check_origin(
    headers: Mapping[str, str], names: Iterable[str], server: tuple[str, int] | None
) -> None:
    """Refused unless Host is the viewer's own address and Origin (or Referer, when the
    browser sent no Origin) is that same origin."""
    host = headers.get("host", "").strip().lower()
    if host not in own_hosts(names, server):
        raise Refused(f"Host {host!r} is not this viewer's address")
    own = f"http://{host}"
    origin = headers.get("origin")
    if origin is not None:
        if origin.lower() != own:
            raise Refused(f"Origin {origin!r} is not this viewer ({own})")
        return
    referer = headers.get("referer")
    if referer is None:
        raise Refused("the post carries neither Origin nor Referer")
    parts = urlsplit(referer)
    if f"{parts.scheme}://{parts.netloc}".lower() != own:
        raise Refused(f"Referer {referer!r} is not this viewer ({own})")


def safe_back(back: str, fallback: str) -> str:
    """Where to go after a label: a path on this viewer (never another site)."""
    parts = urlsplit(back)
    if (
        not back.startswith("/")
        or back.startswith("//")
        or "\\" in back
        or parts.scheme
        or parts.netloc
        or any(ord(c) < 32 for c in back)
    ):
        return fallback
    return back


@dataclass(frozen=True)
class LabelForm:
    """What a label form on a page carries, and the label already on the response."""

    action: str
    token: str
    id: str
    repeat: int
    sha: str
    via: Literal["queue", "page"]
    back: str
    seed: int | None
    current: Label | None


class LabelDesk:
    """The labelling state of one viewer process: its token, its labeller, and the
    labels file's lookup (re-read when the file changes)."""

    def __init__(self, root: Path, labeller: str) -> None:
        self.root = root.resolve()
        self.labeller = labeller
        self.token = secrets.token_urlsafe(32)
        self._lock = threading.Lock()
        self._cached: tuple[Any, LabelLookup, str | None] | None = None

    def valid_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def lookup(self) -> LabelLookup:
        """The labels file read (again only when it changed). A malformed line leaves the
        labels unshown (`problem` says where) rather than every page unreadable."""
        return self._read()[0]

    @property
    def problem(self) -> str | None:
        return self._read()[1]

    def _read(self) -> tuple[LabelLookup, str | None]:
        try:
            sig: Any = signature(labels_path(self.root).stat())
        except OSError:
            sig = None
        with self._lock:
            cached = self._cached
        if cached is not None and cached[0] == sig:
            return cached[1], cached[2]
        problem = None
        try:
            found = read_labels(self.root)
        except InputError as exc:
            found, problem = LabelLookup({}), str(exc).replace(str(self.root) + "/", "")
        with self._lock:
            self._cached = (sig, found, problem)
        return found, problem

    def form(
        self, name: str, spec: str, record: TraceRecord, *, sha: str | None,
        via: Literal["queue", "page"], back: str, seed: int | None = None,
        lookup: LabelLookup | None = None,
    ) -> LabelForm | None:  # fmt: skip
        """The form for `record`, whose whole response hashes to `sha` (`whole_hash`);
        None when it has no response to label."""
        if sha is None:
            return None
        found = self.lookup() if lookup is None else lookup
        return LabelForm(
            action=links.label_href(name),
            token=self.token,
            id=record.id,
            repeat=record.repeat,
            sha=sha,
            via=via,
            back=back,
            seed=seed,
            # The label last given to this very response, whichever judge it is for.
            current=found.latest(LabelKey(spec, record.id, record.repeat, sha)),
        )

    def make_label(self, fields: Mapping[str, str], spec: str, record: TraceRecord) -> Label | None:
        """The label the fields ask for (None for Skip), checked against the record the
        form was shown for: BadLabel names what is wrong."""
        verdict = fields.get("label", "")
        if verdict not in VERDICTS:
            raise BadLabel(f"label: expected pass, fail or skip, not {verdict!r}")
        if record.response is None:
            raise BadLabel(f"sample {record.id!r} has no response to label", 422)
        if fields.get("sha", "") != response_hash(record.response):
            raise BadLabel(
                f"sample {record.id!r}: its response is not the one the form was shown for "
                "(the run was replaced); reload the page", 409,
            )  # fmt: skip
        note = fields.get("note", "")
        if len(note) > MAX_NOTE:
            raise BadLabel(f"note: at most {MAX_NOTE} characters, not {len(note)}")
        via = fields.get("via", "page")
        if via not in ("queue", "page"):
            raise BadLabel(f"via: expected queue or page, not {via!r}")
        if verdict == "skip":
            return None
        # No scorer: the person's verdict on the response holds for every judge.
        return label_for(
            record,
            spec=spec,
            label="pass" if verdict == "pass" else "fail",
            sampling="random" if via == "queue" else "selected",
            labeller=self.labeller,
            note=note,
        )

    def write(self, label: Label) -> None:
        append_labels(self.root, [label])


def whole_hash(
    index: RunIndex, source: BinaryIO, position: int, record: TraceRecord, cap: int
) -> str | None:
    """The hash of the record's whole response, which a label is about. A page reads its
    records with every text cut at `cap` characters, so a line longer than that is read
    again for its response."""
    if record.response is None:
        return None
    if int(index.lengths[position]) <= cap:  # nothing in it was cut
        return response_hash(record.response)
    whole = index.response_of(source, position)
    return None if whole is None else response_hash(whole)


def parse_repeat(value: str) -> int:
    try:
        repeat = int(value)
    except ValueError:
        raise BadLabel(f"repeat: not a number: {value!r}") from None
    if repeat < 0:
        raise BadLabel(f"repeat: must be 0 or more, not {repeat}")
    return repeat


def parse_seed(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        seed = int(value)
    except ValueError:
        raise BadLabel(f"seed: not a number: {value!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise BadLabel(f"seed: must be between 0 and {MAX_SEED}, not {seed}")
    return seed


def new_seed() -> int:
    return secrets.randbelow(MAX_SEED + 1)
