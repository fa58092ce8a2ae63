"""Draws the bar charts of specs/charts.yaml: small PNGs with known answers.

Each chart has a few bars of given heights on a white ground; the question is which bar
is the tallest. PNGs are written with zlib and struct only (no imaging library), so the
same heights give the same bytes on every machine. Run from the repository's root:

    python scripts/make_charts.py

It rewrites specs/data/charts/*.png and specs/data/charts.jsonl.
"""

import json
import struct
import zlib
from pathlib import Path

WIDTH, HEIGHT = 64, 48
WHITE, BAR = (255, 255, 255), (40, 90, 200)
# Each chart's bar heights in pixels, left to right (the tallest is the answer).
CHARTS = {
    "chart-1": [12, 30, 20],
    "chart-2": [40, 10, 25, 18],
    "chart-3": [8, 16, 24, 36, 30],
    "chart-4": [22, 14, 38],
    "chart-5": [15, 33, 27, 9],
}


def png(rows: list[bytes], width: int, height: int) -> bytes:
    """A PNG (8-bit truecolour) of `height` rows of `width` RGB pixels each."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 before each row
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    return png([bytes(rgb) * width] * height, width, height)


def bar_chart(heights: list[int]) -> bytes:
    """Bars of equal width and gaps, standing on the bottom edge."""
    slot = WIDTH // len(heights)
    rows = []
    for y in range(HEIGHT):
        pixels = []
        for x in range(WIDTH):
            bar, offset = divmod(x, slot)
            inside = bar < len(heights) and 2 <= offset < slot - 2
            filled = inside and HEIGHT - y <= heights[bar]
            pixels.append(BAR if filled else WHITE)
        rows.append(b"".join(bytes(p) for p in pixels))
    return png(rows, WIDTH, HEIGHT)


def main(root: Path = Path("specs/data")) -> None:
    (root / "charts").mkdir(parents=True, exist_ok=True)
    lines = []
    for name, heights in CHARTS.items():
        (root / "charts" / f"{name}.png").write_bytes(bar_chart(heights))
        tallest = heights.index(max(heights)) + 1
        row = {
            "id": name,
            "image": f"charts/{name}.png",
            "bars": len(heights),
            "answer": tallest,
            # What the shipped scripted model answers; a real model reads the image.
            "oracle": f"Bar {tallest}.",
        }
        lines.append(json.dumps(row) + "\n")
    (root / "charts.jsonl").write_text("".join(lines))


if __name__ == "__main__":
    main()
