"""Small media files for tests: PNG images written with zlib and struct (no imaging
library), a one-page PDF, and the headers of the other image types."""

import struct
import zlib


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid `width` x `height` PNG of colour `rgb` (8-bit truecolour)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


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
