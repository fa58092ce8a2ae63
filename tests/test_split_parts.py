"""The pieces a run in two processes is put together from: a dataset's halves, the ids'
hashes of both, totals and fingerprints of the halves' records added up in order, the
part a fork writes appended to the run directory, and the fork itself."""

import json
import os
import time
from pathlib import Path

import pytest

from gradetrail_lib.dataset import IdHashes, Sample, load_dataset
from gradetrail_lib.errors import InputError
from gradetrail_lib.forked import Forked
from gradetrail_lib.identity import RecordsFingerprint, records_fingerprint
from gradetrail_lib.rundir import RunDirWriter
from gradetrail_lib.summary import summarize
from gradetrail_lib.totals import RunTotals
from gradetrail_lib.trace import TraceRecord, iter_records
from tests.support.traces import call, record


def as_tuples(samples: list[Sample]) -> list[tuple[str, int, dict[str, object]]]:
    return [(s.id, s.line, s.fields) for s in samples]


@pytest.mark.parametrize(
    "text",
    [
        "".join(json.dumps({"id": i, "x": "é" * (i % 7)}) + "\n" for i in range(41)),
        # Blank lines, one at the cut, and no newline at the end.
        '{"id": 1}\n\n{"id": 2}\n\n\n{"id": 3}\n{"id": 4}\n\n{"id": 5}',
        '{"id": "a"}\n{"id": "b"}\n',
    ],
)
def test_a_jsonl_files_halves_read_as_the_whole_file_with_its_line_numbers(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    dataset = load_dataset(path)
    halves = dataset.halves()
    assert halves is not None
    first, second = (list(h.read(None, 0)) for h in halves)
    assert first and second
    # Each part's size in lines (blank ones too), the file's between them.
    assert sum(h.lines for h in halves) == text.count("\n") + (not text.endswith("\n"))
    assert halves[0].lines >= len(first) and halves[1].lines >= len(second)
    assert as_tuples(first + second) == as_tuples(list(dataset.validated()))
    # After `skip` samples, what follows them; the skipped ids are not hashed.
    ids = IdHashes()
    assert as_tuples(list(halves[1].read(ids, 1))) == as_tuples(second[1:])
    hashed = IdHashes()
    for sample in second[1:]:
        hashed.add(sample.id)
    ids.extend(hashed)
    assert len(ids.repeated()) == len(second) - 1  # each hashed twice: once each


def test_a_file_of_one_line_has_no_halves(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": 1, "x": "' + "y" * 100 + '"}\n')
    assert load_dataset(path).halves() is None


def test_a_halfs_bad_row_names_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(f'{{"id": {i}}}\n' for i in range(9)) + '{"x": 1}\n')
    halves = load_dataset(path, "d.jsonl").halves()
    assert halves is not None
    with pytest.raises(InputError) as raised:
        list(halves[1].read(IdHashes(), 0))
    assert str(raised.value).startswith("d.jsonl:10: id: missing")


def test_a_tables_halves_are_its_rows_in_two(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("id,x\n" + "".join(f"{i},{i * 2}\n" for i in range(5)))
    dataset = load_dataset(path)
    halves = dataset.halves()
    assert halves is not None
    both = [s for h in halves for s in h.read(None, 0)]
    assert as_tuples(both) == as_tuples(dataset.samples)
    assert [s.id for s in halves[1].read(None, 2)] == ["4"]


def test_the_ids_hashes_of_two_halves_tell_an_id_in_both() -> None:
    first, second = IdHashes(), IdHashes()
    for i in range(1000):
        first.add(f"a{i}")
        second.add(f"b{i}")
    first.extend(second)
    assert first.repeated() == set()
    second.clear()
    second.add("a7")
    first.extend(second)
    assert first.repeated() == {IdHashes.of("a7")}


def part_records(offset: int, repeats: int) -> list[TraceRecord]:
    out = []
    for i in range(offset, offset + 6):
        for r in range(repeats):
            if i % 5 == 0:
                out.append(record(f"s{i}", None, repeat=r, answered=False))
            elif i % 4 == 0:
                judge = call(role="judge", model="j", scorer="s", cache_hit=bool(r))
                out.append(record(f"s{i}", {"s": None}, repeat=r, extra_calls=[judge]))
            else:
                out.append(record(f"s{i}", (i + r) % 2, repeat=r, latency_s=0.1 * i))
    return out


@pytest.mark.parametrize("repeats", [1, 3])
def test_totals_of_two_parts_added_up_are_the_totals_of_all(repeats: int) -> None:
    first, second = part_records(0, repeats), part_records(6, repeats)
    whole = RunTotals(["s"])  # one process: the same batches, one after the other
    whole.add_batch(first)
    whole.add_batch(second)
    parts = RunTotals(["s"])
    parts.add_batch(first)
    later = RunTotals(["s"])
    later.add_batch(second)
    parts.extend(later)
    scorers = [("s", "exact")]
    assert summarize(parts, scorers) == summarize(whole, scorers)
    assert parts.case_passes("s") == whole.case_passes("s")
    assert parts.latencies == whole.latencies
    assert parts.served == whole.served
    assert parts.judge.totals() == whole.judge.totals()


def test_a_fingerprint_of_encoded_records_is_the_fingerprint_of_the_records() -> None:
    records = part_records(0, 2)
    fingerprint = RecordsFingerprint()
    fingerprint.update(b"".join(RecordsFingerprint.encode(r) for r in records))
    assert fingerprint.hexdigest() == records_fingerprint(records)


def test_a_part_written_apart_is_appended_to_the_run_in_order(tmp_path: Path) -> None:
    first, second = part_records(0, 1), part_records(6, 1)
    with RunDirWriter(tmp_path) as out:
        part = out.part("later")
        part.write(second)
        part.close()
        out.write(first)
        out.append(part)
        assert not part.records.exists() and not part.fingerprint.exists()
        out._out.close()
        read = list(iter_records(out.staging / "results.jsonl"))
        assert [r.id for r in read] == [r.id for r in first + second]
        assert out.fingerprint.hexdigest() == records_fingerprint(first + second)
        out.abort()


def test_a_fork_hands_back_its_value() -> None:
    parent = os.getpid()
    fork = Forked.start(lambda: (os.getpid() != parent, [1.5] * 100_000))
    assert fork.result() == (True, [1.5] * 100_000)  # more than a pipe holds at once
    fork.stop()  # after the result: nothing left to stop


def test_a_fork_that_raises_or_dies_hands_back_nothing() -> None:
    def fails() -> int:
        raise RuntimeError("no")

    assert Forked.start(fails).result() is None
    assert Forked.start(lambda: os._exit(3)).result() is None


def test_stopping_a_fork_kills_it() -> None:
    fork = Forked.start(lambda: time.sleep(60))
    started = time.monotonic()
    fork.stop()
    assert time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(fork.pid, os.WNOHANG)  # reaped
