"""A failed trial's reason quotes the last line of its log that says something: the exception,
never the carets (`^^^^`) Python 3.11+ prints under a traceback's code, a blank line, a
`File "…"` frame, or torch's exit warning. One rule (trials/ends.py), used by every executor."""

from __future__ import annotations

import pytest

from launcher.slurm.explain import payload_detail
from launcher.trials.ends import log_reason, meaningful_line

# What a rank's log ends with when the user's forward raises (Python 3.11+ marks the expression).
TRACEBACK = """\
step 3 loss 5.41
Traceback (most recent call last):
  File "/site/launcher/train/__main__.py", line 88, in <module>
    main()
    ~~~~^^
  File "/home/me/byo_pkg/models.py", line 41, in forward
    return self.head(x.mean(1)) @ self.proj
           ~~~~~~~~~~~~~~~~~~~~~^~~~~~~~~~~
RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 32x10)

"""


def test_the_exception_line_is_the_reason_not_the_carets_or_the_frames():
    assert meaningful_line(TRACEBACK) == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 32x10)"


@pytest.mark.parametrize(
    "log, reason",
    [
        # A chained error: the last exception, not the banner between them.
        (
            "ValueError: bad\n\nThe above exception was the direct cause of the following exception:\n\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 2, in f\n    g()\nKeyError: 'tokens'\n",
            "KeyError: 'tokens'",
        ),
        # torch's exit warning after a failed rank, behind torch's rank prefix: the error before it counts.
        (
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "[rank1]:[W1123 10:00:00 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() was not "
            "called before program exit\n",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        # Killed before it could say anything: no reason from the log (the exit code says it).
        ("\n   \n^^^^\n", ""),
        # A plain last line is the reason as it is, cut to 160 characters.
        ("x" * 200 + "\n", "x" * 159 + "…"),
    ],
)
def test_the_last_meaningful_line(log, reason):
    assert meaningful_line(log) == reason


def test_the_executors_quote_that_line(tmp_path):
    (tmp_path / "rank0.attempt0.log").write_text("step 1 loss 5.5\n")
    (tmp_path / "rank1.attempt0.log").write_text(TRACEBACK)
    (tmp_path / "exit_code.attempt0").write_text("1\n")
    assert payload_detail(tmp_path) == (
        "srun exit 1; rank1 log ends: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x10 and 32x10)"
    )
    assert log_reason(tmp_path / "rank1.attempt0.log") == meaningful_line(TRACEBACK)
    assert log_reason(tmp_path / "absent.log") == ""
