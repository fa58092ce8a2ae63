"""Images and documents in messages: their parts, types, limits and bytes.

A message whose prompt holds media has a list of parts as its `content` instead of a
text: `{"type": "text", "text": ...}`, and for each image or document
`{"type": "image"|"document", "media_type": "image/png", "sha256": <hex of the bytes>,
"size": <bytes>}` (a PDF's part adds `"pages"`). The part names the bytes by their hash,
never by their path or URL, so it can enter the request key as it is: moving a file
changes no key, editing one changes only the keys of the samples that show it. Records
keep the same parts (hash, type and size, not the bytes).

Where the bytes are is the request's `media` map (`ModelRequest.media`, by hash), which
is not keyed: a file (read when the request is sent), the bytes themselves (a `data:`
URI, or a URL read at load), and the URL when there is one (sent as a URL to a provider
that fetches URLs itself, `MediaLimits`). `sent_messages` resolves the parts
of a request for its adapter: each media part gains `data` (base64) or `url`.

No I/O at import; reading a file happens in `MediaSource.read`.
"""

import base64
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gradetrail_lib.hashing import sha256_hex

MediaKind = Literal["image", "document"]

# Media types told by their first bytes, not by a file's name (a renamed file is what it is).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
DOCUMENT_TYPES = ("application/pdf",)


def sniff(data: bytes) -> str | None:
    """The media type of `data` from its magic bytes, or None when it is none of the
    supported types (PNG, JPEG, WebP, GIF, PDF)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def kind_of(media_type: str) -> MediaKind:
    return "document" if media_type in DOCUMENT_TYPES else "image"


# A page object of a PDF: `/Type /Page` not followed by `s` (that is the page tree).
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_PDF_COUNT = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", re.DOTALL)


def pdf_pages(data: bytes) -> int:
    """A PDF's page count: the page tree's `/Count` when it is readable (the largest, the
    root's), else the page objects counted. Compressed object streams can hide both;
    then it reads 0, and no page limit can refuse it."""
    counts = [int(m) for m in _PDF_COUNT.findall(data)]
    if counts:
        return max(counts)
    return len(_PDF_PAGE.findall(data))


def media_part(data: bytes, media_type: str) -> dict[str, Any]:
    """The neutral part of `data` (see the module's docstring)."""
    part: dict[str, Any] = {
        "type": kind_of(media_type),
        "media_type": media_type,
        "sha256": sha256_hex(data),
        "size": len(data),
    }
    if media_type == "application/pdf":
        part["pages"] = pdf_pages(data)
    return part


@dataclass(frozen=True)
class MediaSource:
    """Where a media part's bytes are: a file (read when sent), or the bytes; and the
    URL they were read from, for a provider that takes URLs. Not part of the key."""

    path: str | None = None
    data: bytes | None = None
    url: str | None = None
    # The file's or URL's last name, for a document's `filename` where an API wants one.
    name: str = "document.pdf"

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        return Path(self.path).read_bytes()


@dataclass(frozen=True, kw_only=True)
class MediaLimits:
    """What one provider takes in one request (from its documentation): the bytes of
    one image and one document, how many of each, a document's pages, and whether it
    fetches an image's or a document's `https` URL itself (otherwise the bytes are read
    and inlined)."""

    image_bytes: int
    images: int
    document_bytes: int
    documents: int
    pages: int
    image_urls: bool = False
    document_urls: bool = False
    image_types: tuple[str, ...] = IMAGE_TYPES
    document_types: tuple[str, ...] = DOCUMENT_TYPES


MB = 1024 * 1024


def is_media_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") in ("image", "document")


def media_parts(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from (p for p in content if is_media_part(p))


def limit_problem(
    limits: MediaLimits | None, provider: str, parts: list[dict[str, Any]]
) -> str | None:
    """Why `provider` cannot take one request's media `parts`, or None when it can."""
    if not parts:
        return None
    if limits is None:
        return f"provider {provider} takes no images or documents"
    images = [p for p in parts if p["type"] == "image"]
    documents = [p for p in parts if p["type"] == "document"]
    for part in parts:
        accepted = limits.image_types if part["type"] == "image" else limits.document_types
        if part["media_type"] not in accepted:
            return f"provider {provider} takes no {part['media_type']}"
    if len(images) > limits.images:
        return f"{len(images)} images, and provider {provider} takes at most {limits.images}"
    if len(documents) > limits.documents:
        return (
            f"{len(documents)} documents, and provider {provider} takes at most {limits.documents}"
        )
    for part in images:
        if part["size"] > limits.image_bytes:
            return (
                f"an image of {part['size']} bytes, and provider {provider} takes at most "
                f"{limits.image_bytes} bytes an image"
            )
    for part in documents:
        if part["size"] > limits.document_bytes:
            return (
                f"a document of {part['size']} bytes, and provider {provider} takes at most "
                f"{limits.document_bytes} bytes a document"
            )
    pages = sum(p.get("pages", 0) for p in documents)
    if pages > limits.pages:
        return f"{pages} document pages, and provider {provider} takes at most {limits.pages}"
    return None


def sent_messages(
    messages: list[dict[str, Any]],
    media: Mapping[str, MediaSource] | None,
    limits: MediaLimits | None = None,
) -> list[dict[str, Any]]:
    """The messages with each media part resolved for an adapter: `url` when the source
    has one and the provider takes URLs of its kind (`limits`), otherwise `data` (the
    bytes, base64),
    and `name`. The messages themselves when none holds media (a text request's body is
    what it was)."""
    if not media:
        return messages
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            if is_media_part(part):
                source = media[part["sha256"]]
                resolved = {**part, "name": source.name}
                urls = limits is not None and (
                    limits.image_urls if part["type"] == "image" else limits.document_urls
                )
                if urls and source.url is not None:
                    resolved["url"] = source.url
                else:
                    resolved["data"] = base64.b64encode(source.read()).decode("ascii")
                parts.append(resolved)
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out


def data_url(part: Mapping[str, Any]) -> str:
    """A resolved part as a `data:` URL (or its `url`)."""
    if "url" in part:
        return str(part["url"])
    return f"data:{part['media_type']};base64,{part['data']}"


def message_text(content: Any) -> str:
    """A message's text: the content itself, or its text parts joined (media left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "".join(str(p.get("text", "")) for p in texts)
    return "" if content is None else str(content)
