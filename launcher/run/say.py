"""One line of news for the person at the terminal (stderr), with rich only where it shows.

rich costs ~40 ms of imports (56 modules), a fifth of a `launcher sweep --detach` start-up that prints
a few lines and leaves (issue 30 item 11). Where stderr is not a terminal (a script, a log, a test),
rich would print the plain text anyway; here it is printed as it is, never wrapped mid-line.
"""

from __future__ import annotations

import sys


def say(text: str, *, bold: str = "") -> None:
    """Print `text` to stderr as one line, taken literally; on a terminal through rich, the first `bold`
    in it in bold."""
    if not sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)
        return
    from rich.console import Console  # lazy: see the module docstring
    from rich.markup import escape

    shown = escape(text)
    if bold:
        shown = shown.replace(escape(bold), f"[bold]{escape(bold)}[/bold]", 1)
    Console(stderr=True).print(shown, soft_wrap=True)
