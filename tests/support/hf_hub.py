"""A Hugging Face dataset as a download from the Hub leaves it in the `datasets` cache
(`<owner>___<name>/<config>/0.0.0/<commit>/<name>-<split>.arrow`), with the Hub switched
off: `datasets.load_dataset(repo, config, split=..., revision=...)` then reads it from the
cache, so the loader's real call is exercised with no network."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.optional import need


def hub_cache(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    repo: str,
    revision: str,
    splits: dict[str, list[dict[str, Any]]],
    config: str = "default",
) -> Path:
    """`repo` at `revision` with `splits` (name: rows) in a fresh datasets cache; the
    folder the rows are in."""
    datasets_config = need("datasets.config")
    from datasets.packaged_modules.json.json import Json

    tmp_path.mkdir(parents=True, exist_ok=True)
    cache = tmp_path / "hf-datasets"
    monkeypatch.setattr(datasets_config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets_config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    files = {}
    for split, rows in splits.items():
        source = tmp_path / f"{split}-{revision[:6]}.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        files[split] = str(source)
    builder = Json(
        cache_dir=str(cache),
        dataset_name=repo.replace("/", "___"),
        config_name=config,  # datasets' cache reader checks the folder's name against it
        config_id=config,
        hash=revision,
        data_files=files,
    )
    builder.download_and_prepare()
    # A Hub download keeps the owner's spelling in the folder (`Rowan___hellaswag`) and
    # names its Arrow files after the repo's name alone (`hellaswag-validation.arrow`).
    built = cache / builder.dataset_name
    top = cache / repo.replace("/", "___")
    if built != top:
        built.rename(top)
    folder = top / config / "0.0.0" / revision
    for arrow in folder.glob(f"{builder.dataset_name}-*.arrow"):
        arrow.rename(folder / arrow.name.replace(builder.dataset_name, repo.split("/")[-1]))
    return folder
