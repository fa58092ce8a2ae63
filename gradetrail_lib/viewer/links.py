"""The viewer's URLs. These paths are the contract (query parameters are the pages'):

* `/`: the runs under the root;
* `/run/<run-dir-name>`: a run's samples (`?failures=1`: the failing ones, each with its
  input and full response);
* `/run/<run-dir-name>/sample/<sample-id>` (`?repeat=N` for a repeat other than 0;
  `?raw=1`: the record's line as written, as text, for texts the page cuts);
* `/diff/<run-a>/<run-b>`: the samples the two runs disagree on (`?all=1`: every one);
* `/label/<run-dir-name>?seed=N` (with `gradetrail view --labels` only): the labelling
  queue (`&at=K`: its K-th sample; `&after=K`: the first unlabelled one after the K-th).

Every segment is percent-encoded (a sample id may hold `/`, `?` or `#`); a query keeps
only the parameters that differ from their defaults, so a view has one URL.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlencode

VIEWER_URL_ENV = "GRADETRAIL_VIEWER_URL"

Params = Mapping[str, str | int | None]


def segment(text: str) -> str:
    return quote(text, safe="")


def query(params: Params) -> str:
    """`?a=1&b=x` of the parameters that are set (None, "" and 0 are left out)."""
    kept = [(k, str(v)) for k, v in params.items() if v not in (None, "", 0)]
    return "?" + urlencode(kept) if kept else ""


def runs_href(params: Params | None = None) -> str:
    return "/" + query(params or {})


def run_href(run: str, params: Params | None = None) -> str:
    return f"/run/{segment(run)}" + query(params or {})


def sample_href(run: str, sample_id: str, repeat: int = 0) -> str:
    return f"/run/{segment(run)}/sample/{segment(sample_id)}" + query({"repeat": repeat})


def sample_raw_href(run: str, sample_id: str, repeat: int = 0) -> str:
    return f"/run/{segment(run)}/sample/{segment(sample_id)}" + query({"repeat": repeat, "raw": 1})


def diff_href(run_a: str, run_b: str, params: Params | None = None) -> str:
    return f"/diff/{segment(run_a)}/{segment(run_b)}" + query(params or {})


def label_href(run: str, params: Params | None = None) -> str:
    return f"/label/{segment(run)}" + query(params or {})


def viewer_url(run_dir: Path | str, base: str | None = None) -> str | None:
    """The viewer's page for a run directory, under `base` (default the environment's
    GRADETRAIL_VIEWER_URL, e.g. http://127.0.0.1:8765); None when there is no base."""
    base = base if base is not None else os.environ.get(VIEWER_URL_ENV, "")
    if not base.strip():
        return None
    return base.strip().rstrip("/") + run_href(Path(run_dir).name)
