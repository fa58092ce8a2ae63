"""Hashes that say what a run is: spec, dataset, scorer, requests and the run identity.

Two result sets are comparable exactly when their identities match. The identity covers
the spec (as validated data, so comments and key order do not matter), the dataset's
bytes and every file a scorer or judge reads.
"""

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail_lib.datasets.registry import package_file
from gradetrail_lib.hashing import canonical_json, hash_json, sha256_hex
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import key_base_url, request_params
from gradetrail_lib.scorers.registry import ScorerConfig
from gradetrail_lib.spec.spec import LoadedSpec, spec_document_fields

if TYPE_CHECKING:  # pipeline imports this module's neighbours; avoid a cycle at run time
    from gradetrail_lib.results.trace import TraceRecord


def spec_hash(loaded: LoadedSpec) -> str:
    return hash_json(spec_document_fields(loaded.spec))


def scorer_files(loaded: LoadedSpec) -> dict[str, Path]:
    """Files the scorers read (schemas, Python sources, judge prompts), by the name the
    spec gives them."""
    files: dict[str, Path] = {}
    for config in loaded.spec.scorers:
        files.update(config.files(loaded.base_dir))
    return files


def tool_files(loaded: LoadedSpec) -> dict[str, Path]:
    """The Python sources of the spec's tools (what they return enters the requests)."""
    files: dict[str, Path] = {}
    for tool in loaded.spec.tools or []:
        files.update(tool.files(loaded.base_dir))
    return files


def judge_files(loaded: LoadedSpec) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for config in loaded.spec.scorers:
        if getattr(config, "type", None) == "judge":
            files.update(config.files(loaded.base_dir))
    return files


def file_hashes(files: dict[str, Path]) -> dict[str, str]:
    return {name: sha256_hex(path.read_bytes()) for name, path in sorted(files.items())}


def one_scorer_hash(config: ScorerConfig, base_dir: Path) -> str:
    """One scorer's config and the files it reads: equal hashes score alike."""
    dumped = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    return hash_json({"scorer": dumped, "files": file_hashes(config.files(base_dir))})


def scorer_hashes(loaded: LoadedSpec) -> dict[str, str]:
    return {c.name: one_scorer_hash(c, loaded.base_dir) for c in loaded.spec.scorers}


def scorer_hash(loaded: LoadedSpec) -> str:
    """Covers every scorer, in order (the scores asset's code version): a config, a judge
    prompt, a judge model or a Python scorer's source changes it."""
    return hash_json(list(scorer_hashes(loaded).items()))


def fewshot_files(loaded: LoadedSpec) -> dict[str, Path]:
    """The few-shot examples' file, when they come from one other than the dataset (its
    rows enter every prompt)."""
    config = loaded.spec.fewshot
    source = config.source if config is not None else None
    if source is None or source.path is None:
        return {}
    if source.package is not None:
        return {"fewshot.source": package_file(source.package, source.path)}
    return {"fewshot.source": loaded.resolve(source.path)}


def _choice_fields(loaded: LoadedSpec) -> dict[str, Any]:
    """What a multiple-choice or few-shot spec adds to its requests (nothing otherwise, so
    the hashes of other specs stay)."""
    spec = loaded.spec
    if spec.choices is None and spec.fewshot is None:
        return {}
    fields = spec.model_dump(
        mode="json",
        include={
            "choices", "gold", "method", "choice_prefix", "unconditional_context", "fewshot",
            "chat_template",
        },
        exclude_none=True,
    )  # fmt: skip
    return {**fields, "fewshot_files": file_hashes(fewshot_files(loaded))}


def requests_hash(loaded: LoadedSpec, model: ModelConfig) -> str:
    """Covers what enters the requests but the data (the responses asset's code version)."""
    spec = loaded.spec
    agent: dict[str, Any] = _choice_fields(loaded)
    if spec.messages is not None or spec.tools is not None:  # absent otherwise: hashes stay
        agent |= {
            "messages": [m.model_dump(mode="json", exclude_none=True) for m in spec.messages or []],
            "tools": [t.model_dump(mode="json", exclude_none=True) for t in spec.tools or []],
            "tool_choice": spec.tool_choice,
            "step_budget": spec.step_budget,
            "tool_files": file_hashes(tool_files(loaded)),
        }
    media = {"media": spec.media} if spec.media is not None else {}  # absent: hashes stay
    return hash_json(
        {
            **agent,
            **media,
            "system": spec.system,
            "prompt": spec.prompt,
            "params": request_params(spec.params),
            "provider": model.provider,
            "model": model.name,
            "base_url": key_base_url(model),
        }
    )


def dataset_media_hash(content_hash: str, media_digest: str | None) -> str:
    """The dataset's hash, covering the media files its samples show: the data's own
    hash when they show none (so a text dataset's hash is what it was)."""
    if media_digest is None:
        return content_hash
    return hash_json({"data": content_hash, "media": media_digest})


def run_identity(loaded: LoadedSpec, dataset_hash: str) -> str:
    files = {**scorer_files(loaded), **tool_files(loaded), **fewshot_files(loaded)}
    return hash_json(
        {"spec": spec_hash(loaded), "dataset": dataset_hash, "files": file_hashes(files)}
    )


def spec_requests_hash(loaded: LoadedSpec) -> str:
    """What enters the requests of every model of the spec (partitions share a code version)."""
    return hash_json(sorted(requests_hash(loaded, m) for m in loaded.spec.models))


class RecordsFingerprint:
    """A content hash of scored records (the scores step's data version), taken one
    record at a time as a run writes them."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def add(self, r: "TraceRecord") -> None:
        self._digest.update(self.encode(r))

    def add_all(self, records: "Iterable[TraceRecord]") -> None:
        for record in records:
            self.add(record)

    @staticmethod
    def encode(r: "TraceRecord") -> bytes:
        """What the fingerprint hashes of one record: its id and repeat, its calls'
        request keys, its scores (by scorer name) and its outcome."""
        scores = sorted((k, v.score, v.reason, v.error) for k, v in r.scores.items())
        keys = [c.request_key for c in r.calls]
        return canonical_json([r.id, r.repeat, keys, scores, r.outcome]).encode()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def records_fingerprint(records: "Iterable[TraceRecord]") -> str:
    fingerprint = RecordsFingerprint()
    for record in records:
        fingerprint.add(record)
    return fingerprint.hexdigest()
