"""Small media files for tests: PNG images (by scripts/make_charts.py's writer: zlib and
struct, no imaging library), a PDF of N pages, and the headers of the other image types."""

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_charts.py"


def make_charts() -> ModuleType:
    """scripts/make_charts.py as a module: its PNG writer serves the tests too."""
    spec = importlib.util.spec_from_file_location("make_charts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid `width` x `height` PNG of colour `rgb` (8-bit truecolour)."""
    solid: bytes = make_charts().solid_png(width, height, rgb)
    return solid


def pdf(pages: int) -> bytes:
    """A minimal PDF with `pages` empty pages (its page tree's /Count says so)."""
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        *[b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>" for _ in range(pages)],
    ]
    out = b"%PDF-1.4\n"
    for number, body in enumerate(objects, start=1):
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    return out + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
WEBP = (
    b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00"
    b"/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"
)
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"
