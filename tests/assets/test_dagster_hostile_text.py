"""Record text in Dagster's Markdown metadata (step 12, item 7): sample ids, model names
and labels from records and specs are escaped, so a link in an id is not a link, a `|`
or a newline does not break a table, and bidirectional controls show as escapes."""

from markdown_it import MarkdownIt

from gradetrail_assets.leaderboard import leaderboard_metadata
from gradetrail_assets.metadata import scores_metadata
from gradetrail_lib.analysis.summary import summarize
from tests.support.traces import manifest, record

HOSTILE = [
    "[x](http://evil.example/)",
    "a | b",
    "line\nbreak",
    "\u202eevil.txt",
    "nul\x00id",
    "<script>alert(1)</script>",
    "../../etc/passwd",
]


def _render(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def _rows(html: str, table: int) -> list[str]:
    return html.split("<table>")[table + 1].split("</table>")[0].split("<tr>")[1:]


def test_the_summary_failure_lines_escape_sample_ids_and_reasons() -> None:
    records = [
        record(sample_id, 0.0, failure_mode="wrong_answer", response=f"r {i}")
        for i, sample_id in enumerate(HOSTILE)
    ]
    summary = summarize(records, [("s", "exact")])
    meta = scores_metadata(summary, records, manifest(), "/tmp/run")
    markdown = meta["summary"].value
    html = _render(markdown)
    assert "<a " not in html and "<script" not in html
    assert "\u202e" not in markdown and "\x00" not in markdown
    failures = _rows(html, 3)  # scorers, outcomes, failure modes, then the failures
    assert len(failures) == 1 + len(HOSTILE)  # the header and one row per sample
    for row in failures[1:]:
        assert row.count("<td>") == 3
    assert "\\u202eevil.txt" in html and "nul\\u0000id" in html
    assert "[x](http://evil.example/)" in html and "line\\nbreak" in html


def test_the_leaderboard_escapes_model_names_and_pair_labels() -> None:
    models = [
        {"model": name, "passed": 1, "n": 2, "pass_rate": 0.5, "pass_low": 0.1,
         "pass_high": 0.9, "others": {}}
        for name in HOSTILE
    ]  # fmt: skip
    pairs = [
        {"a": HOSTILE[0], "b": HOSTILE[1], "refused": "samples differ | [y](http://e/)"},
        {"a": HOSTILE[2], "b": HOSTILE[3], "scorer": "s", "n": 2, "difference": 0.0,
         "low": -0.5, "high": 0.5, "warning": None, "paired_test": "sign-flip",
         "paired_p": 1.0, "verdict": "no winner", "winner": HOSTILE[3]},
    ]  # fmt: skip
    board = {"primary": "s", "scorers": ["s"], "models": models, "pairs": pairs}
    markdown = leaderboard_metadata(board)["leaderboard"].value
    html = _render(markdown)
    assert "<a " not in html and "<script" not in html
    assert "\u202e" not in markdown and "\x00" not in markdown
    ranking, verdicts = _rows(html, 0), _rows(html, 1)
    assert len(ranking) == 1 + len(HOSTILE) and len(verdicts) == 1 + len(pairs)
    # tier, rank interval, model, passed, pass rate, CI; pair, difference, p, adjusted p,
    # separated.
    assert all(row.count("<td>") == 6 for row in ranking[1:])
    assert all(row.count("<td>") == 5 for row in verdicts[1:])
    assert "\\u202eevil.txt" in ranking[4] and "[x](http://evil.example/)" in ranking[1]
