"""`summary` builds on `stats`, never the reverse: importing the statistics loads no
summary module (the run totals both use live below them, in `totals`)."""

import subprocess
import sys


def test_stats_does_not_import_summary() -> None:
    code = (
        "import sys, gradetrail_lib.analysis.stats; "
        "print('gradetrail_lib.analysis.summary' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
