"""benchmarks.gpu_smoke's last step on a lent GPU: this machine's one-rank site profile (`launcher profile --ranks 1`)
into the file benchmarks.mfu_width scores. Run here on a CPU rank: the same command, the device aside."""

from __future__ import annotations

import json

from benchmarks import gpu_smoke
from tests.unit.test_site_profile import check_measured


def test_the_smoke_test_measures_a_one_rank_profile_or_says_why_not(tmp_path):
    """Fails if the step writes no profile, one of another rank count, or raises instead of a one-line reason."""
    out = tmp_path / "gpu_profile.json"
    assert gpu_smoke.measure_profile(out, device="cpu") is None
    doc = json.loads(out.read_text())
    check_measured(doc, ranks=1, nodes=1, scopes=set())
    assert doc["device"]["type"] == "cpu" and doc["mem_bw_gbs"] > 0
    why = gpu_smoke.measure_profile(tmp_path / "never.json", device="tpu")
    assert why is not None and why.startswith("launcher profile ") and "exited 2: " in why and "\n" not in why
    assert not (tmp_path / "never.json").exists()
