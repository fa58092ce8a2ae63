"""Hashes that say what a run is: spec, dataset, scorer, requests and the run identity.

Two result sets are comparable exactly when their identities match. The identity covers
the spec (as validated data, so comments and key order do not matter), the dataset's
bytes and every file a scorer or judge reads.
"""

from pathlib import Path

from gradetrail_lib.hashing import hash_json, sha256_hex
from gradetrail_lib.request import key_base_url, request_params
from gradetrail_lib.spec import JsonSchemaScorer, LoadedSpec, ModelConfig, spec_document_fields


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
