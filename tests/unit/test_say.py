"""run/say.py: a line of news on stderr, plain where stderr is not a terminal (no rich import, no
wrapping), through rich on a terminal with its bold part in bold and any brackets taken literally."""

from __future__ import annotations

import re
import sys

from launcher.run.say import say


def test_plain_where_stderr_is_not_a_terminal(capsys):
    line = "sweep [bold]x[/bold]: " + "t" * 200
    say(line, bold="x")
    assert capsys.readouterr().err == line + "\n"


def test_on_a_terminal_rich_shows_the_bold_part(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("NO_COLOR", raising=False)
    say("sweep s-1: 2 trials → /r/[x]", bold="s-1")
    err = capsys.readouterr().err
    assert err.startswith("sweep \x1b[1ms-")  # bold (rich's highlighter then colours the digit, as before)
    assert re.sub(r"\x1b\[[0-9;]*m", "", err) == "sweep s-1: 2 trials → /r/[x]\n"  # the brackets as text
