"""A sample's images and documents: its fields named by a spec's `media:` read into the
neutral parts of `providers.media` and the sources of their bytes.

A field holds one reference or a list of them; each is a path relative to the dataset's
folder, a `data:` URI (base64), or an `https` URL (read once here, for its hash; `http`
only to this machine, for tests and local servers). Types are told by the bytes.
"""

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json
from gradetrail_lib.providers.media import MediaSource, media_part, sniff

# Read from an URL at most this much (larger than any provider's limit).
MAX_URL_BYTES = 64 * 1024 * 1024
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Resolved:
    part: dict[str, Any]
    source: MediaSource


class MediaResolver:
    """Reads the media a sample's fields name, keeping each file's part (by path, size and
    modification time) so a file is hashed once a run, and every hash it gave (`seen`:
    the media files the run's samples reference, which the dataset hash covers)."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._files: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
        self._urls: dict[str, Resolved] = {}
        self.seen: set[str] = set()

    def resolve(self, sample: Sample, field: str, where: str) -> list[Resolved]:
        """The media of `sample`'s `field`: an InputError naming the dataset (`where`),
        the sample's line and the field when it is missing, unreadable or of no
        supported type."""
        if field not in sample.fields:
            raise InputError(where, sample.line, field, f"sample {sample.id!r}: no such field")
        value = sample.fields[field]
        refs = value if isinstance(value, list) else [value]
        out = []
        for ref in refs:
            if not isinstance(ref, str) or not ref:
                raise InputError(
                    where, sample.line, field,
                    f"sample {sample.id!r}: a media reference is a path, a data: URI or an "
                    f"https URL, not {ref!r}",
                )  # fmt: skip
            try:
                resolved = self._one(ref)
            except (OSError, ValueError) as exc:
                raise InputError(where, sample.line, field, f"sample {sample.id!r}: {exc}") from exc
            self.seen.add(resolved.part["sha256"])
            out.append(resolved)
        return out

    def digest(self) -> str | None:
        """A hash of every media file seen (None when the samples show none)."""
        return hash_json(sorted(self.seen)) if self.seen else None

    def _one(self, ref: str) -> Resolved:
        if ref.startswith("data:"):
            return _data_uri(ref)
        scheme = urlsplit(ref).scheme
        if scheme in ("https", "http"):
            resolved = self._urls.get(ref)
            if resolved is None:
                resolved = self._urls[ref] = _read_url(ref)
            return resolved
        path = (self.base_dir / ref).resolve()
        stat = path.stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = self._files.get(str(path))
        if cached is not None and cached[0] == stamp:
            part = cached[1]
        else:
            data = path.read_bytes()
            part = _part(data, f"{ref}")
            self._files[str(path)] = (stamp, part)
        return Resolved(part, MediaSource(path=str(path), name=path.name))


def _part(data: bytes, what: str) -> dict[str, Any]:
    media_type = sniff(data)
    if media_type is None:
        raise ValueError(f"{what} is not a PNG, JPEG, WebP or GIF image, nor a PDF")
    return media_part(data, media_type)


def _data_uri(ref: str) -> Resolved:
    header, _, payload = ref.partition(",")
    if not header.endswith(";base64"):
        raise ValueError("a data: URI of media must be base64 (data:TYPE;base64,...)")
    try:
        data = base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"a data: URI whose base64 does not decode: {exc}") from exc
    part = _part(data, "the data: URI")
    declared = header[len("data:") : -len(";base64")]
    if declared and declared != part["media_type"]:
        raise ValueError(f"a data: URI says {declared} but holds {part['media_type']}")
    extension = part["media_type"].rsplit("/", 1)[1]
    return Resolved(part, MediaSource(data=data, name=f"document.{extension}"))


def _read_url(url: str) -> Resolved:
    parts = urlsplit(url)
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise ValueError(f"{url}: media URLs must be https (http only to this machine)")
    import httpx  # only a spec with URLs pays for it

    data = bytearray()
    try:
        with (
            httpx.Client(timeout=30.0, follow_redirects=True) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise ValueError(f"{url}: HTTP {response.status_code}")
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_URL_BYTES:
                    raise ValueError(f"{url}: larger than {MAX_URL_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise ValueError(f"{url}: {type(exc).__name__}") from exc
    name = os.path.basename(unquote(parts.path)) or "document"
    # Only an https URL is passed on to a provider that fetches URLs: a loopback one
    # (tests, a local server) means nothing to it, so its bytes are inlined.
    passed = url if parts.scheme == "https" else None
    source = MediaSource(data=bytes(data), url=passed, name=name)
    return Resolved(_part(bytes(data), url), source)
