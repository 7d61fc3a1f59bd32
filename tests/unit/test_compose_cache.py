"""The composition cache's road (launcher/config/compose.py, simple_override.py, composed_cache.py)
gives what Hydra's road gives: the same values of the same types, the same document, the same error
line; an edited recipe, a changed environment and a damaged cache are seen."""

from __future__ import annotations

import json
import os
import random

import pytest

from launcher.config import hydra_compose
from launcher.config.compose import compose_config
from launcher.config.composed_cache import cache_root
from launcher.config.errors import ConfigError
from launcher.config.load import load_config
from launcher.config.messages import parsed_override
from launcher.config.recipe_folders import recipe_folders
from launcher.config.simple_override import simple_override
from launcher.config.validate import validate


def hydras_config(command, recipes=None):
    """The config by Hydra's road alone."""
    return validate(load_config(hydra_compose.hydra_compose_dict(command, recipe_folders(recipes))))


# Each a form the subset reads; Hydra reads it to the same value and type.
READ = [
    "64", "-3", "+7", "0", "1.5", "-0.25", "true", "false", "null", "bench-0-123", "/tmp/x-y/z.v2",
    "x.true", "a+b@c%d", "_private", "'--hold'", '"a b, c"', "''", "[]", "[1,2,3,4]", "['--hold']",
    "[true,null,1.5,word]", "['a,b',c]",
]  # fmt: skip
# Each a form the subset must leave to Hydra: Hydra reads it otherwise than as a plain word, or not at all.
LEFT = [
    "1e5", ".5", "1.", "1_000", "007", "True", "NULL", "inf", "nan", "Inf", "a,b", "${x}", "'${x}'",
    "[[1]]", "[1, 2]", "a b", "", "x:y", "'it\\'s'", "{a: 1}", "range(1,3)",
]  # fmt: skip


def test_simple_overrides_read_as_hydras_grammar_reads_them():
    """Fails if `_WORD` took a leading digit or dot (`1e5` a word, Hydra's float), if `_INT` took
    `1_000` or `007`, or if a keyword in another case (`True`) were read as a word."""
    for text in READ:
        key, value = simple_override(f"k={text}")
        hydra = parsed_override(f"k={text}").value()
        assert (type(value), value) == (type(hydra), hydra), text
    for text in LEFT:
        assert simple_override(f"k={text}") is None, text
    for prefixed in ("+k=1", "++k=1", "~k", "k.0=1", "k-x=1", "k"):
        assert simple_override(prefixed) is None, prefixed


def test_fuzzed_words_the_subset_reads_hydra_reads_alike():
    """20,000 random strings of the characters that matter: whatever the subset reads, Hydra reads to the
    same value and type (items of a list included)."""
    rng = random.Random(7)
    alphabet = "aZ_/-.+@%019,'\" []$\\eE:xtrufalsnN"
    read = 0
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        ours = simple_override(f"k={text}")
        if ours is None:
            continue
        read += 1
        hydra = parsed_override(f"k={text}").value()
        assert (type(ours[1]), ours[1]) == (type(hydra), hydra), text
        if isinstance(hydra, list):
            assert [type(v) for v in ours[1]] == [type(v) for v in hydra], text
    assert read > 1000  # the fuzz reaches the subset, not only its refusals


COMMANDS = [
    [],
    ["cluster=devcluster", "sweep.nodes=[1,2,3,4]", "sweep.repeats=64", "cluster.sbatch_extra=['--hold']"],
    ["parallel=fsdp", "batch.micro=3", "optim.lr=1", "sweep.results_dir=/scratch/me/runs", "sweep.name=a-b.c"],
    ["cluster=slurm", "cluster.partition=gpu", "cluster.exclusive=true", "precision=bf16", "seed=5"],
    ["cluster=devcluster", "optim=sgd", "optim.lr=0.05", "sweep.steps=20", "sweep.warmup_steps=2", "run.requeue=true"],
    ["model=llama3_8b", "parallel=fsdp_tp", "cluster=example_gpu_site", "sweep.world_sizes=[8,16]"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c)[:40] or "defaults")
def test_the_cache_road_gives_hydras_config_cold_and_warm(command, monkeypatch, tmp_path):
    """Fails if a value were set without its field's type (`optim.lr=1` would stay the int 1, Hydra's road
    gives 1.0; a choice would stay text, not its StrEnum), or if the warm road called Hydra at all."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path))
    hydras = hydras_config(command)
    assert compose_config(command) == hydras  # cold: the group choices composed (plain_compose.py) and kept
    assert len(list((tmp_path / "composed").glob("*.json"))) == 1

    def no_hydra(*args, **kwargs):
        raise AssertionError("a warm command composed with Hydra")

    monkeypatch.setattr(hydra_compose, "composed_plain", no_hydra)
    monkeypatch.setattr(hydra_compose, "hydra_compose_dict", no_hydra)
    warm = compose_config(command)
    assert warm == hydras
    assert repr(warm) == repr(hydras)  # types too: 1.0, not 1; Layout.fsdp, not 'fsdp'


def test_the_environment_is_read_at_each_command_not_cached(monkeypatch, tmp_path):
    """devcluster's slurm_conf is `${oc.env:LAUNCHER_DEVCLUSTER_DIR,…}`: fails if an entry were kept resolved."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAUNCHER_DEVCLUSTER_DIR", "/first")
    assert compose_config(["cluster=devcluster"]).cluster.slurm_conf == "/first/etc/slurm.conf"
    monkeypatch.setenv("LAUNCHER_DEVCLUSTER_DIR", "/second")
    assert compose_config(["cluster=devcluster"]).cluster.slurm_conf == "/second/etc/slurm.conf"


def test_a_command_recipe_keeps_its_trial_keys_as_text(monkeypatch, tmp_path):
    """job=command's argv holds `${trial.…}` (escaped in the entry): fails if the cache's road resolved or
    dropped the escape, where Hydra's road keeps the text for each trial to fill in."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path / "cache"))
    recipe = tmp_path / "recipes" / "job" / "mine.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(
        "kind: command\nlaunch: torchrun\nmetrics: meter\nprobe: false\n"
        "argv: [python, train.py, '--micro=${batch.micro}', '--ws=${trial.world_size}']\n"
    )
    command, folder = ["job=mine", "sweep.repeats=2", "batch.micro=3"], str(tmp_path / "recipes")
    hydras = hydras_config(command, folder)
    assert compose_config(command, folder) == hydras
    assert compose_config(command, folder) == hydras  # warm
    assert hydras.job.argv[2:] == ["--micro=${batch.micro}", "--ws=${trial.world_size}"]


def test_an_edited_recipe_is_composed_again(monkeypatch, tmp_path):
    """Fails if the key left out the recipe files' stamps: the second command would read the old n_layers."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path / "cache"))
    recipe = tmp_path / "recipes" / "model" / "mine.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text("name: mine\narch: gpt\nn_layers: 2\n")
    folder = str(tmp_path / "recipes")
    assert compose_config(["model=mine"], folder).model.n_layers == 2
    recipe.write_text("name: mine\narch: gpt\nn_layers: 3\n")
    stamp = recipe.stat().st_mtime_ns + 1_000_000  # an edit within the same mtime tick is still seen by its size
    os.utime(recipe, ns=(stamp, stamp))
    assert compose_config(["model=mine"], folder).model.n_layers == 3


BAD = [
    ["run.steps=abc"],
    ["sweep.nope=1"],
    ["cluster=nope"],
    ["batch=[1]"],
    ["optim.lr=[1]"],
    ["cluster=devcluster", "cluster.exclusive=maybe"],
    ["sweep=default", "sweep.steps=1.5"],
]


@pytest.mark.parametrize("command", BAD, ids=lambda c: " ".join(c))
def test_a_bad_value_reads_as_hydras_error(command, monkeypatch, tmp_path):
    """Fails if the cache's road raised its own error for a value that does not fit instead of handing
    the command to Hydra's road, whose line names the key, the value and the fix."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as hydras:
        hydras_config(command)
    for _ in range(2):  # cold, then with the group choices' entry kept
        with pytest.raises(ConfigError) as ours:
            compose_config(command)
        assert str(ours.value) == str(hydras.value)


def test_a_damaged_or_unwritable_cache_composes_again(monkeypatch, tmp_path):
    """Fails if a corrupt entry raised (or were taken as a document) or an unwritable cache stopped the command."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path))
    expected = compose_config(["cluster=slurm"])
    (entry,) = (cache_root() / "composed").glob("*.json")
    for damage in ("{not json", "[1, 2]", ""):
        entry.write_text(damage)
        assert compose_config(["cluster=slurm"]) == expected
        assert json.loads(entry.read_text())["cluster"]["partition"] == expected.cluster.partition  # rewritten
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(blocked))  # mkdir under a file fails, even as root
    assert compose_config(["cluster=slurm"]) == expected


def test_every_bundled_option_composes_without_hydra_to_hydras_config(monkeypatch, tmp_path):
    """Each option of each bundled group, chosen alone: with Hydra's composition unavailable, the cold command
    (plain_compose.py reads the recipes) and the warm one (the kept document) build the config Hydra's road
    builds. Fails if a bundled recipe took a form plain_compose refuses (Hydra again), or if what it composes
    differs from Hydra's in any field of any option."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAUNCHER_DEVCLUSTER_DIR", "/var/tmp/launcher-devcluster")
    base = recipe_folders()[0]
    expected = {}
    for group in sorted(p for p in base.iterdir() if p.is_dir()):
        for option in sorted(group.glob("*.yaml")):
            command = (f"{group.name}={option.stem}",)
            try:
                expected[command] = hydras_config(list(command))
            except ConfigError:  # an option that needs more than itself (e.g. job=command's argv)
                continue
    assert len(expected) >= 35

    def no_hydra(*args, **kwargs):
        raise AssertionError("composed with Hydra")

    monkeypatch.setattr(hydra_compose, "composed_plain", no_hydra)
    monkeypatch.setattr(hydra_compose, "hydra_compose_dict", no_hydra)
    for command, config in expected.items():
        for _ in ("cold", "warm"):
            assert repr(compose_config(list(command))) == repr(config), command


def test_a_user_folder_composes_without_hydra_as_hydra_does(monkeypatch, tmp_path):
    """Your folder first, then the bundled tree: your config.yaml (its own keys merged after the groups'), a
    `_target_` model whose keys become kwargs, a cluster file that replaces the bundled one. Fails if
    plain_compose merged the root's keys before the groups' (sweep.steps would read the group's 100), gave the
    open model node ModelConfig's defaults (they would be folded into kwargs), or read the bundled file first."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "recipes"
    (folder / "model").mkdir(parents=True)
    (folder / "cluster").mkdir()
    root = (recipe_folders()[0] / "config.yaml").read_text()
    (folder / "config.yaml").write_text(root + "sweep:\n  steps: 7\n")
    (folder / "model" / "mine.yaml").write_text(
        "_target_: mypkg.models.build\nhidden: 64\nseq_len: 32\n"
        "inputs:\n  tokens: {shape: [32], dtype: int64, high: 256}\n"
    )
    (folder / "cluster" / "slurm.yaml").write_text("name: slurm\npartition: mine\n")
    commands = [["model=mine"], ["model=mine", "cluster=slurm", "sweep.repeats=2"], ["cluster=slurm"]]
    expected = [hydras_config(c, str(folder)) for c in commands]
    assert expected[0].sweep.steps == 7 and expected[0].model.kwargs == {"hidden": 64, "seq_len": 32}
    assert expected[2].cluster.partition == "mine"

    def no_hydra(*args, **kwargs):
        raise AssertionError("composed with Hydra")

    monkeypatch.setattr(hydra_compose, "composed_plain", no_hydra)
    monkeypatch.setattr(hydra_compose, "hydra_compose_dict", no_hydra)
    for command, config in zip(commands, expected, strict=True):
        for _ in ("cold", "warm"):
            assert repr(compose_config(command, str(folder))) == repr(config), command


def test_interpolations_resolve_as_hydra_resolves_them(monkeypatch, tmp_path):
    """`${oc.env:…}` read here (set, unset with a default, a default OmegaConf reads as null), a key reference
    (OmegaConf's resolution), an unset variable with no default (Hydra's error line). Fails if resolved.py took
    `null` for text, kept a reference unresolved, or raised its own error for the unset variable."""
    monkeypatch.setenv("LAUNCHER_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "recipes"
    (folder / "cluster").mkdir(parents=True)
    (folder / "cluster" / "mine.yaml").write_text(
        "name: mine\nkind: slurm\npartition: ${oc.env:LNCH_PART,gpu-a}\naccount: ${oc.env:LNCH_ACCT,null}\n"
    )
    (folder / "cluster" / "ref.yaml").write_text(
        "name: ref\nkind: slurm\npartition: gpu-b\nqos: q-${cluster.partition}\n"
    )
    (folder / "cluster" / "strict.yaml").write_text("name: strict\nkind: slurm\npartition: ${oc.env:LNCH_UNSET}\n")
    monkeypatch.delenv("LNCH_PART", raising=False)
    monkeypatch.delenv("LNCH_ACCT", raising=False)
    monkeypatch.delenv("LNCH_UNSET", raising=False)
    for env in ({}, {"LNCH_PART": "h100", "LNCH_ACCT": "proj7"}):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        hydras = hydras_config(["cluster=mine"], str(folder))
        assert compose_config(["cluster=mine"], str(folder)) == hydras
        assert (hydras.cluster.partition, hydras.cluster.account) == (
            env.get("LNCH_PART", "gpu-a"),
            env.get("LNCH_ACCT"),
        )
    hydras = hydras_config(["cluster=ref"], str(folder))
    assert compose_config(["cluster=ref"], str(folder)) == hydras
    assert hydras.cluster.qos == "q-gpu-b"
    with pytest.raises(ConfigError) as hydras_error:
        hydras_config(["cluster=strict"], str(folder))
    with pytest.raises(ConfigError) as ours:
        compose_config(["cluster=strict"], str(folder))
    assert str(ours.value) == str(hydras_error.value)
