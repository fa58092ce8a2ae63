"""`visible` and `markdown_text`: the one rule for showing record text (step 12, item 7)."""

import pytest
from markdown_it import MarkdownIt

from gradetrail_lib.results.text import markdown_text, visible

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_bidirectional_controls_and_nul_are_written_as_escapes() -> None:
    assert visible("\u202eevil.txt") == "\\u202eevil.txt"
    assert visible("a\x00b") == "a\\u0000b"
    shown = visible(BIDI + "\x01\x1b\x7f")
    assert shown == "".join(f"\\u{ord(c):04x}" for c in BIDI + "\x01\x1b\x7f")
    # Layout and every other script are left as they are.
    for text in ("line\nnext\ttab\r\n", "عربي עברית 中文 é ∑", "<script>", "plain"):
        assert visible(text) == text


def _render(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


@pytest.mark.parametrize(
    "hostile",
    [
        "[x](http://evil.example/)",
        "![img](http://evil.example/a.png)",
        "<http://evil.example/>",
        "<script>alert(1)</script>",
        "a | b | c",
        "first\nsecond\r\nthird",
        "**bold** _em_ `code` ~~gone~~ &amp; \\",
        "\u202eevil.txt\x00",
        "../../etc/passwd",
    ],
)
def test_markdown_text_is_one_literal_table_cell(hostile: str) -> None:
    table = f"| id | n |\n|---|---|\n| {markdown_text(hostile)} | 1 |\n"
    html = _render(table)
    assert "<a " not in html and "<img" not in html and "<script" not in html
    assert "<em>" not in html and "<strong>" not in html and "<code>" not in html
    assert "<s>" not in html and "<del>" not in html
    assert html.count("<tr>") == 2 and html.count("<td>") == 2  # one row, both cells
    assert "\u202e" not in html and "\x00" not in html
    cell = html.split("<td>")[1].split("</td>")[0]
    expected = visible(hostile).replace("\r\n", "\\n").replace("\n", "\\n")
    unescaped = cell.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    assert unescaped.replace("&amp;", "&") == expected


def test_bare_urls_are_not_autolinked() -> None:
    """GitHub's autolinks (a bare `http://`, `www.` or e-mail address) need their `:`,
    `.` or `@` as such: escaped, the text shows the same and links nowhere."""
    assert markdown_text("see http://evil.example/x") == "see http\\://evil.example/x"
    assert markdown_text("WWW.evil.example") == "WWW\\.evil.example"
    assert markdown_text("a@evil.example") == "a\\@evil.example"
    assert markdown_text("ratio 3:1 at 0.5") == "ratio 3:1 at 0.5"  # plain text stays plain
