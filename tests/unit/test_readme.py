"""CI must run exactly what the README tells a user."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _commands(text: str) -> list[str]:
    blocks = text.split("```bash\n")[1:]
    return [b.split("```")[0].strip() for b in blocks]


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    first, second = _commands(readme)[:2]
    assert first.endswith("launcher sweep")
    assert second.endswith("python -m pytest")
    # what CI's one line does before the tests: an editable install, and the dev cluster they submit to
    assert ".venv/bin/pip install -e '.[cpu,test]'" in second and ".venv/bin/launcher cluster up --containers" in second
    assert ".venv/bin/pip install -e '.[cpu]'" in first
    ci_lines = [
        ln for ln in (REPO / ".ci/run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert ci_lines == [second]
