"""A run pauses the cyclic garbage collector while it computes (a batch the cache
answers whole) and lets it run while it waits on a provider, leaving it as it was."""

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.pipeline import plan
from gradetrail_lib.records import Scoring
from gradetrail_lib.run import run_model
from gradetrail_lib.spec import load_spec
from tests.support.oracle import oracle_project


class Watching(LocalBackend):
    """Notes whether the collector runs each time requests are sent."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def run(self, requests, on_result):  # type: ignore[no-untyped-def]
        if requests:
            self.seen.append(gc.isenabled())
        super().run(requests, on_result)


@pytest.fixture
def scoring_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    seen: list[bool] = []
    parts = Scoring.parts

    def watched(self, responses, *args):  # type: ignore[no-untyped-def]
        seen.append(gc.isenabled())  # as the batch's scoring starts
        yield from parts(self, responses, *args)

    monkeypatch.setattr(Scoring, "parts", watched)
    yield seen


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_sending_runs_the_collector_and_cached_batches_pause_it(
    tmp_path: Path, scoring_seen: list[bool], collector_on: None
) -> None:
    loaded = load_spec(oracle_project(tmp_path, 12, 1))
    model = loaded.spec.models[0]
    cache = ResponseCache(tmp_path / "c.duckdb")
    backend = Watching()
    run_model(plan(loaded, model), cache, backend, tmp_path / "r", batch_samples=5)
    assert backend.seen == [True, True, True]  # three batches sent, the collector on
    assert gc.isenabled()
    scoring_seen.clear()
    backend.seen.clear()
    run_model(plan(loaded, model), cache, backend, tmp_path / "r", batch_samples=5)
    assert backend.seen == []
    assert scoring_seen == [False, False, False]  # the cache's batches: paused
    assert gc.isenabled()  # as it was found


def test_a_host_that_disabled_the_collector_finds_it_disabled(
    tmp_path: Path, collector_on: None
) -> None:
    loaded = load_spec(oracle_project(tmp_path, 4, 1))
    backend = Watching()
    gc.disable()
    run_model(plan(loaded, loaded.spec.models[0]), None, backend, tmp_path / "r")
    assert backend.seen == [False]  # not switched on behind the host's back
    assert not gc.isenabled()


def test_a_failed_run_resumes_the_collector(tmp_path: Path, collector_on: None) -> None:
    loaded = load_spec(oracle_project(tmp_path, 4, 1))

    class Failing(LocalBackend):
        def run(self, requests, on_result):  # type: ignore[no-untyped-def]
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_model(plan(loaded, loaded.spec.models[0]), None, Failing(), tmp_path / "r")
    assert gc.isenabled()


def test_pauses_of_two_runs_end_with_the_collector_as_it_was(collector_on: None) -> None:
    from gradetrail_lib.collector import CollectorPause

    first, second = CollectorPause(), CollectorPause()
    first.pause()
    second.pause()  # a second run, in another thread, starts while the first computes
    first.resume()
    assert not gc.isenabled()  # the second still computes
    first.pause()
    first.resume()
    second.resume()
    assert gc.isenabled()
    second.resume()  # again: nothing to undo
    assert gc.isenabled()
