"""CI must run exactly what the README tells a user."""

import re
from pathlib import Path

from launcher.config.choices import Precision

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


def _row(readme: str, head: str) -> set[str]:
    """The options a README table row names: its backticked plain names (`parallel.ep` and other keys left out)."""
    (row,) = [ln for ln in readme.splitlines() if ln.startswith(f"| {head} |")]
    return set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[2]))


def test_the_readme_lists_every_bundled_model_layout_cluster_and_precision():
    """Issue 31 item 13: the README's key table named neither llama3_405b, hsdp, the *_cp layouts, gb200_nvl72 nor
    precision=fp8. Its rows must name exactly the recipe files of recipes/model, parallel and cluster, and every
    Precision choice, so a new recipe (or one removed) without a README change fails here."""
    readme = (REPO / "README.md").read_text()
    for group in ("model", "parallel", "cluster"):
        files = {p.stem for p in (REPO / "recipes" / group).glob("*.yaml")}
        assert _row(readme, f"`{group}=`") == files, group
    assert _row(readme, "`precision`") == {p.value for p in Precision}


def test_the_sample_says_what_a_two_core_machine_shows():
    """The sample table (0.96 at 2 ranks) is not what the README's own command shows on CI's kind of machine: the
    paragraph after it says so (issue 31, item 14). Fails on a README that shows the sample alone."""
    readme = (REPO / "README.md").read_text()
    after = readme.split("## What you get", 1)[1].split("```", 2)[2].split("\n\n", 2)[1]
    assert "2-core machine" in after and "0.4–0.8" in after and "`busy host`" in after and "1 rank" in after
