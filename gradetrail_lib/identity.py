"""Hashes that say what a run is: spec, dataset, scorer, requests and the run identity.

Two result sets are comparable exactly when their identities match. The identity covers
the spec (as validated data, so comments and key order do not matter), the dataset's
bytes and every file a scorer or judge reads.
"""

from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.hashing import hash_json, sha256_hex
from gradetrail_lib.request import key_base_url, request_params
from gradetrail_lib.spec import JsonSchemaScorer, LoadedSpec, ModelConfig, spec_document_fields

if TYPE_CHECKING:  # pipeline imports this module's neighbours; avoid a cycle at run time
    from gradetrail_lib.pipeline import Responses, ResultRow


def spec_hash(loaded: LoadedSpec) -> str:
    return hash_json(spec_document_fields(loaded.spec))


def scorer_files(loaded: LoadedSpec) -> dict[str, Path]:
    """Files the scorer reads, by the name the spec gives them."""
    scorer = loaded.spec.scorer
    if isinstance(scorer, JsonSchemaScorer) and scorer.schema_path is not None:
        return {scorer.schema_path: loaded.resolve(scorer.schema_path)}
    return {}


def file_hashes(files: dict[str, Path]) -> dict[str, str]:
    return {name: sha256_hex(path.read_bytes()) for name, path in sorted(files.items())}


def scorer_hash(loaded: LoadedSpec) -> str:
    """Covers the scorer config and the files it reads (the scores asset's code version)."""
    config = loaded.spec.scorer.model_dump(mode="json", by_alias=True, exclude_none=True)
    return hash_json({"scorer": config, "files": file_hashes(scorer_files(loaded))})


def requests_hash(loaded: LoadedSpec, model: ModelConfig) -> str:
    """Covers what enters the requests but the data (the responses asset's code version)."""
    spec = loaded.spec
    return hash_json(
        {
            "system": spec.system,
            "prompt": spec.prompt,
            "params": request_params(spec.params),
            "provider": model.provider,
            "model": model.name,
            "base_url": key_base_url(model),
        }
    )


def run_identity(loaded: LoadedSpec, dataset_hash: str) -> str:
    return hash_json(
        {
            "spec": spec_hash(loaded),
            "dataset": dataset_hash,
            "files": file_hashes(scorer_files(loaded)),
        }
    )


def spec_requests_hash(loaded: LoadedSpec) -> str:
    """What enters the requests of every model of the spec (partitions share a code version)."""
    return hash_json(sorted(requests_hash(loaded, m) for m in loaded.spec.models))


def responses_fingerprint(responses: "Responses") -> str:
    """A content hash of a responses step's output (its data version)."""
    return hash_json(
        {
            "ok": sorted(
                (k, sha256_hex(r.text), r.stop_reason) for k, r in responses.responses.items()
            ),
            "failed": sorted((k, e.message) for k, e in responses.errors.items()),
        }
    )


def rows_fingerprint(rows: "list[ResultRow]") -> str:
    """A content hash of scored rows (the scores step's data version)."""
    return hash_json([(r.id, r.request_key, r.score, r.reason, r.outcome) for r in rows])
