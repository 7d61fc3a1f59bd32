"""Running the CLI in this process and keeping what it printed."""

from __future__ import annotations

import contextlib
import io

from launcher.cli import main


def launch_printed(argv: list[str]) -> tuple[int, str]:
    """`launcher ARGV`'s exit status and its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, out.getvalue()
