"""A batch's records are made, scored and handed on a part at a time (`RecordBuilder.parts`, so
that each step over them finds them in the CPU's caches): the parts, in order, are the
records one part would be, whatever the part's size, with cached and new responses,
samples that share a request, a response that never came, repeats and an async scorer."""

import json
from pathlib import Path

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.records import RecordBuilder
from gradetrail_lib.engine.responses import Responses
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.results.trace import record_json
from gradetrail_lib.spec.spec import load_spec
from tests.support.plans import pushed

SCORERS = """
import asyncio

async def later(record, response):
    await asyncio.sleep(0)
    return response == "yes"
"""


def batch_and_responses(tmp_path: Path) -> tuple[object, Responses]:
    (tmp_path / "data").mkdir()
    rows = [{"id": f"s{i}", "q": "same" if i in (2, 5) else f"q{i}"} for i in range(9)]
    (tmp_path / "data" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mine.py").write_text(SCORERS)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {path: data/x.jsonl}\nprompt: '{{ q }}?'\nrepeats: 2\n"
        "model: {provider: openai_compatible, name: m, base_url: 'http://127.0.0.1:9/v1'}\n"
        "scorers:\n  - {name: said, type: regex, pattern: 'yes'}\n"
        "  - {name: later, type: python, ref: 'mine.py:later'}\n"
    )
    loaded = load_spec(spec)
    (batch,) = plan(loaded, loaded.spec.models[0]).batches(100)
    responses = Responses()
    for n, (key, _request) in enumerate(batch.unique_requests.items()):
        if n == 3:
            continue  # never answered
        text = "yes" if n % 2 else "no"
        responses.responses[key] = ModelResponse(text, "m", "stop", 3, 1, 0.5, 1, {}, [])
        if n % 3:
            responses.cache_hits.add(key)
    return batch, responses


def test_a_batchs_records_in_parts_are_its_records_in_one(tmp_path: Path) -> None:
    batch, responses = batch_and_responses(tmp_path)

    def parts(size: int) -> list[list[bytes]]:
        builder = pushed(RecordBuilder(batch, MemoryCache(), LocalBackend()), responses)
        return [[record_json(r) for r in part] for part in builder.parts(responses, size)]

    whole = parts(100)
    assert len(whole) == 1 and len(whole[0]) == 18  # 9 samples, 2 repeats each
    small = parts(4)
    assert [len(p) for p in small] == [4, 4, 4, 4, 2]
    assert [line for part in small for line in part] == whole[0]
    records = [json.loads(line) for line in whole[0]]
    assert [r["id"] for r in records] == [f"s{i}" for i in range(9) for _ in range(2)]
    assert {r["outcome"] for r in records} == {"scored", "provider_error"}
    assert {r["calls"][0]["cache_hit"] for r in records} == {True, False}
    assert {r["scores"]["later"]["score"] for r in records if r["response"]} == {0.0, 1.0}
    shared = [r for r in records if r["id"] in ("s2", "s5")]
    assert len({r["calls"][0]["request_key"] for r in shared}) == 2  # one a repeat
    assert len({id(r) for r in shared}) == len(shared)
