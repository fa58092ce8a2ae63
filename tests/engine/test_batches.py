"""A run's batches: whole samples with all their repeats, about BATCH_ITEMS items each,
and a run batch by batch writes what a run in one batch writes."""

from pathlib import Path

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.engine.plan import BATCH_ITEMS, batch_samples, plan
from gradetrail_lib.engine.run import RunOptions, run_model
from gradetrail_lib.spec.spec import load_spec
from tests.support.oracle import oracle_project


def test_a_batch_holds_whole_samples_and_about_batch_items_items() -> None:
    assert batch_samples(1) == BATCH_ITEMS
    assert batch_samples(4) == BATCH_ITEMS // 4
    assert batch_samples(10, items=8) == 1  # never no sample


def test_batches_keep_each_samples_repeats_together(tmp_path: Path) -> None:
    loaded = load_spec(oracle_project(tmp_path, 5, 3))
    batches = list(plan(loaded, loaded.spec.models[0]).batches(2))
    assert [len(b.items) for b in batches] == [6, 6, 3]
    for batch in batches:
        ids = [item.sample.id for item in batch.items]
        assert ids == [i for i in dict.fromkeys(ids) for _ in range(3)]
        assert [item.repeat for item in batch.items] == [0, 1, 2] * (len(ids) // 3)


def test_a_run_in_batches_writes_what_a_run_in_one_batch_writes(tmp_path: Path) -> None:
    spec = oracle_project(tmp_path, 11, 3)
    loaded = load_spec(spec)
    done = {}
    for size in (2, 100):  # 6 batches, then 1; no cache file: each run sends every request
        done[size] = run_model(
            plan(loaded, loaded.spec.models[0]), None, LocalBackend(), tmp_path / f"r{size}",
            RunOptions(batch_samples=size),
        )  # fmt: skip
    small, whole = done[2], done[100]
    read = [(d.run_dir / "results.jsonl").read_bytes() for d in (small, whole)]
    assert read[0] == read[1]
    assert small.summary == whole.summary
    assert small.history.fingerprint == whole.history.fingerprint
    assert small.manifest.target.calls == whole.manifest.target.calls == 33
