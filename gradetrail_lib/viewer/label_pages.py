"""The labelling pages (`gradetrail view --labels`): the queue `/label/<run>?seed=N` and
the post that writes a label (labelling.py has the rules and the checks)."""

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from gradetrail_lib.labels.store import LabelKey, response_hash
from gradetrail_lib.report.html import sample_view
from gradetrail_lib.viewer import links
from gradetrail_lib.viewer.index import RunIndex, Signature
from gradetrail_lib.viewer.labelling import (
    BadLabel,
    LabelDesk,
    answered_positions,
    judge_of,
    new_seed,
    parse_repeat,
    parse_seed,
    safe_back,
    stratified_order,
)
from gradetrail_lib.viewer.pages import TEXT_CAP, BadRequest, Page, Pages, _int

HASHES_KEPT = 4


@dataclass(frozen=True)
class Reference:
    scorer: str
    reason: str


class LabelPages:
    def __init__(self, pages: Pages, desk: LabelDesk) -> None:
        self.pages = pages
        self.desk = desk
        self._hashes: OrderedDict[Signature, list[str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def _response_hashes(self, index: RunIndex, source: BinaryIO) -> list[str | None]:
        """Each record's whole response hash (None: no response, or a damaged line), read
        once per results file: "k of n labelled" needs every response's hash, and a page
        otherwise reads only its own records."""
        with self._lock:
            found = self._hashes.get(index.signature)
        if found is not None:
            return found
        hashes: list[str | None] = []
        for position in range(index.n):
            whole = None
            if index.answered[position] and position not in index.damage:
                whole = index.response_of(source, position)
            hashes.append(None if whole is None else response_hash(whole))
        with self._lock:
            self._hashes[index.signature] = hashes
            while len(self._hashes) > HASHES_KEPT:
                self._hashes.popitem(last=False)
        return hashes

    # -- /label/<run>?seed=N -------------------------------------------------------------
    def queue(self, name: str, params: Mapping[str, str]) -> Page:
        try:
            seed = parse_seed(params.get("seed"))
        except BadLabel as exc:
            raise BadRequest(str(exc)) from None
        if seed is None:  # the seed goes in the URL, so the queue is one link
            return Page(303, location=links.label_href(name, {"seed": str(new_seed())}))
        with self.pages.catalog.samples(name) as (run, index, source):
            m = run.manifest
            judge = judge_of(m)
            positions = answered_positions(index)
            verdicts = index.passes(judge)[positions].tolist()
            order = [positions[i] for i in stratified_order(verdicts, seed)]
            n = len(order)
            hashes = self._response_hashes(index, source)
            lookup = self.desk.lookup()
            spec = m.spec.name
            # (Every position in the queue has a response, so a hash.)
            keys = [
                LabelKey(spec, index.ids[p], int(index.repeats[p]), hashes[p] or "") for p in order
            ]
            labelled = [lookup.latest(key) is not None for key in keys]
            state = {"seed": str(seed)}
            after = _int(params, "after", 0, 0, n) if "after" in params else None
            if after is not None:
                following = [k for k in range(after, n) if not labelled[k]]
                following += [k for k in range(0, after) if not labelled[k]]
                target = {"at": str(following[0] + 1)} if following else {}
                return Page(303, location=links.label_href(name, state | target))
            at = _int(params, "at", 0, 1, max(n, 1)) if "at" in params else None
            if at is None:
                first = next((k for k in range(n) if not labelled[k]), None)
                at = None if first is None else first + 1
            context: dict[str, Any] = {
                "name": name, "label": m.label, "seed": seed, "judge": judge, "n": n,
                "done": sum(labelled), "at": at, "skipped": n < index.n,
                "unanswered": index.n - n, "problem": self.desk.problem,
            }  # fmt: skip
            if at is not None and n:
                position = order[at - 1]
                (record,) = index.read(source, [position], TEXT_CAP)
                view = sample_view(record, m.primary_scorer, index.threshold, "queue")
                judges = {s.name for s in m.scorers if s.type == "judge"}
                context |= {
                    "record": record,
                    "view": view,
                    "reference": self.pages.datasets.reference(m, record.id, TEXT_CAP),
                    "references": [
                        Reference(scorer=s, reason=e.reason)
                        for s, e in record.scores.items()
                        if s not in judges and e.reason
                    ],
                    "form": self.desk.form(
                        name, spec, record, sha=hashes[position], via="queue", seed=seed,
                        lookup=lookup,
                        back=links.label_href(name, state | {"after": str(at)}),
                    ),
                    "previous": (
                        links.label_href(name, state | {"at": str(at - 1)}) if at > 1 else None
                    ),
                    "next": links.label_href(name, state | {"at": str(at + 1)}) if at < n else None,
                    "next_unlabelled": links.label_href(name, state | {"after": str(at)}),
                    "sample": links.sample_href(name, record.id, record.repeat),
                }  # fmt: skip
            return self.pages.render("page_label.html.j2", **context)

    # -- POST /label/<run> -----------------------------------------------------------------
    def post(self, name: str, fields: Mapping[str, str]) -> Page:
        """Writes the label the form asks for (nothing for Skip) and sends the browser
        back (303: a reload does not post twice)."""
        try:
            return self._post(name, fields)
        except BadLabel as exc:
            return self.pages.error(exc.status, "This label was not saved", str(exc))

    def _post(self, name: str, fields: Mapping[str, str]) -> Page:
        sample_id = fields.get("id")
        if not sample_id:
            raise BadLabel("id: missing")
        repeat = parse_repeat(fields.get("repeat", "0"))
        parse_seed(fields.get("seed"))
        with self.pages.catalog.samples(name) as (run, index, source):
            position = index.find(sample_id, repeat)
            if position is None:
                raise BadLabel(f"no sample {sample_id!r} (repeat {repeat}) in this run", 404)
            if position in index.damage:
                raise BadLabel(f"sample {sample_id!r}: its record cannot be read", 422)
            # Uncut: the label is about the whole response (one record, once per label).
            (record,) = index.read(source, [position])
            label = self.desk.make_label(fields, run.manifest.spec.name, record)
        if label is not None:
            self.desk.write(label)
        fallback = links.sample_href(name, sample_id, repeat)
        return Page(303, location=safe_back(fields.get("back", ""), fallback))
