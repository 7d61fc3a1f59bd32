"""`launcher profile` on cluster=local (issue 32 item 2): two ranks here measure matmuls, the attention kernel, a copy,
the per-op cost and the four
collectives among themselves (one machine: `intra` only, `inter` said not measured), and the file holds every
field with positive figures; `launcher plan cluster.profile=` reads it.
Its Slurm run: tests/slurm/test_profile_slurm.py."""

from __future__ import annotations

import json

from launcher.cli import main
from tests.unit.test_site_profile import check_measured


def test_profile_on_local_ranks(tmp_path, capsys):
    out = tmp_path / "site.json"
    code = main(["profile", f"sweep.results_dir={tmp_path}", "--ranks", "2", "--output", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())
    check_measured(doc, ranks=2, nodes=1, scopes={"intra"})
    assert doc["skipped"] == ["inter: one node, nothing crosses a link there"]
    assert f"profile written to {out}" in printed and "all_reduce intra (2 ranks)" in printed
    folder = next(tmp_path.glob("profile-local-*"))
    assert json.loads((folder / "trials" / "000-ws2" / "profile.json").read_text()) == doc
    assert main(["plan", "cluster=devcluster", f"cluster.profile={out}", "--gpus", "1,2"]) == 0
    said = capsys.readouterr().out
    assert f"cpu measured ({out}): the recipe's ops at its rates, per micro-batch fp32 matmuls" in said
    assert f"{doc['op_us']:.3g} µs per op × 817 ops a step" in said  # tiny_gpt's DDP step (test_site_profile's rule)
