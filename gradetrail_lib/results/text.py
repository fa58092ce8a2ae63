"""Record text (ids, responses, model names) made safe to show: every surface that
shows it (the viewer, the HTML report, Dagster's metadata) goes through `visible`, and
Dagster's Markdown through `markdown_text`, so none of them has its own rule.

A record's text is data written by a model or a dataset, and some characters in it act
on the text around them instead of showing: the bidirectional controls reorder it (an id
`\\u202eevil.txt` displays as "txt.live"), and NUL and the other C0 controls show as
nothing or end a string early. `visible` writes each of them as its escape (`\\u202e`),
so a reader sees that it is there and what it is; tab, newline and carriage return are
layout and stay.
"""

import re

# U+061C, U+200E/F, U+202A-U+202E and U+2066-U+2069: the bidirectional marks,
# embeddings, overrides and isolates; and the C0 controls but tab, LF and CR, and DEL.
_HIDDEN = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# What Markdown (CommonMark with GitHub's tables, strikethrough and autolinks, as the
# Dagster UI renders it) reads as syntax within a line: emphasis, code, links and
# images, raw HTML and entities, table cells, strikethrough, and e-mail autolinks (`@`);
# GitHub's autolinks of a bare `http://` or `www.` are broken by escaping their `:`/`.`.
_MARKDOWN = re.compile(r"([\\`*_\[\]()<>!&|~@]|:(?=//))")
_WWW = re.compile(r"(www)\.", re.IGNORECASE)
_NEWLINE = re.compile(r"\r\n|\r|\n")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def visible(text: str) -> str:
    """`text` with every bidirectional control and every control character but tab,
    newline and carriage return written as its escape (`\\u202e`, `\\u0000`)."""
    if _HIDDEN.search(text) is None:  # the usual case, and a quick one on a long text
        return text
    return _HIDDEN.sub(_escape, text)


def markdown_text(text: str) -> str:
    """`text` as Markdown that shows it literally on one line: `visible`, every
    character Markdown would read as syntax backslash-escaped, and each line break as a
    visible `\\n`, so a record's text is never a link, never HTML and never ends a
    table row or cell."""
    escaped = _MARKDOWN.sub(r"\\\1", visible(text))
    escaped = _WWW.sub(r"\1\\.", escaped)
    return _NEWLINE.sub(r"\\\\n", escaped)
