"""The least a fully cached re-run of bench_scale's spec can do, with nothing of gradetrail's
(a reference for the warm path, as bench_pipeline's bare client is for the cold one):

    python -m bench.bare_replay DATASET CACHE BASE_URL OUT

Reads the JSONL dataset, renders each prompt with str.format, keys each request as
gradetrail_lib.providers.request defines the key (sha256 of the canonical JSON), looks the keys up
in the DuckDB cache 8,192 at a time, scores the last number of each answer, and writes a
JSON line per sample (its messages, key, usage, answer and score). No checks, no
objects but dicts, no statistics, no manifest: what this machine allows at all. Exits 1
unless the cache answered every key (so the floor is measured on the real lookups).
"""

import hashlib
import json
import re
import sys

import duckdb

BATCH = 8192
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def main() -> int:
    dataset, cache, base_url, out_path = sys.argv[1:5]
    fixed = {
        "v": 1, "provider": "openai_compatible", "model": "fake-1", "base_url": base_url,
        "params": {"max_tokens": 16, "temperature": 0.0},
    }  # fmt: skip
    head, tail = canonical({**fixed, "messages": "\x00"}).split(canonical("\x00"))
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH '{cache}' AS c (READ_ONLY)")
    found = 0
    with open(dataset, "rb") as lines, open(out_path, "w") as out:
        while True:
            rows = [json.loads(line) for _, line in zip(range(BATCH), lines, strict=False)]
            if not rows:
                break
            messages = [[{"role": "user", "content": "Q: {a} + {b}\n".format_map(r)}] for r in rows]
            keys = [
                hashlib.sha256((head + canonical(m) + tail).encode()).hexdigest() for m in messages
            ]
            answers = {
                row[0]: row
                for row in con.execute(
                    "SELECT key, text, input_tokens, output_tokens, latency_s FROM c.responses"
                    " WHERE key IN (SELECT unnest(string_split($k, ',')))",
                    {"k": ",".join(keys)},
                ).fetchall()
            }
            found += len(answers)
            for row, message, key in zip(rows, messages, keys, strict=True):
                _, text, tokens_in, tokens_out, latency = answers[key]
                numbers = NUMBER.findall(text)
                score = 1.0 if numbers and float(numbers[-1]) == float(row["answer"]) else 0.0
                record = {
                    "id": row["id"], "messages": message, "key": key, "input_tokens": tokens_in,
                    "output_tokens": tokens_out, "latency_s": latency, "response": text,
                    "score": score,
                }  # fmt: skip
                out.write(encode(record) + "\n")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
