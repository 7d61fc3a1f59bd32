"""Bad input: one clear line on stderr, exit 2, and no sweep folder left behind."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from launcher.cli import main
from launcher.config.expand import expand

RECIPES = "recipes"  # messages name the folder; the test substitutes the real path

CASES = [
    (["batch.micro=0"], "batch.micro=0 must be a positive integer; set e.g. batch.micro=8"),
    (["batch.micro=abc"], "batch.micro=abc must be an integer; e.g. batch.micro=8"),
    (["batch.micro=2.5"], "batch.micro=2.5 must be an integer; e.g. batch.micro=8"),
    (["batch.accum=-1"], "batch.accum=-1 must be a positive integer; set e.g. batch.accum=1"),
    (
        ["foo=1"],
        "unknown config key 'foo' (from 'foo=1'); the top level has: batch, cluster, data, job, model, optim, parallel, precision, run, seed, sweep, train, trainer",
    ),
    (
        ["+foo=1"],
        "unknown config key 'foo' (from '+foo=1'); the top level has: batch, cluster, data, job, model, optim, parallel, precision, run, seed, sweep, train, trainer",
    ),
    (["batch.foo=2"], "unknown config key 'batch.foo' (from 'batch.foo=2'); batch has: accum, global_batch, micro"),
    (["batch.global=64"], "batch.global was renamed batch.global_batch; use batch.global_batch=64"),
    (["+batch.global=64"], "batch.global was renamed batch.global_batch; use batch.global_batch=64"),
    (["~batch.micro"], "batch.micro cannot be deleted (the schema has it); set a value instead, e.g. batch.micro=8"),
    (["cluster.setup={a:1}"], "cluster.setup={{a:1}} must be a list of strings; e.g. cluster.setup=['a','b']"),
    (
        ["cluster.sbatch_extra=[[--x]]"],
        "cluster.sbatch_extra=[['--x']] must be a list of strings; e.g. cluster.sbatch_extra=['a','b']",
    ),
    (["sweep.world_sizes=4"], "sweep.world_sizes=4 must be a list of integers; e.g. sweep.world_sizes=[1,2]"),
    (["model.arch=null"], "model.arch=null must be one of gpt, mlp, llama; e.g. model.arch=gpt"),
    (
        ["parallel.schedule=2f2b"],
        "parallel.schedule='2f2b' is not one of gpipe, 1f1b, interleaved_1f1b; set e.g. parallel.schedule=gpipe",
    ),
    # Your own model (`_target_`): checked at plan time, before anything is created.
    (
        ["model=target", "model._target_=nopkg.build", "model.inputs={x:{shape:[4]}}"],
        "model._target_='nopkg.build' does not import: No module named 'nopkg'; put its package on PYTHONPATH (locally) or in cluster.setup/cluster.env (Slurm)",
    ),
    (
        ["data=dataset", "data._target_=nopkg.data.make"],
        "data._target_='nopkg.data.make' does not import: No module named 'nopkg'; put its package on PYTHONPATH (locally) or in cluster.setup/cluster.env (Slurm)",
    ),
    (
        ["model=target", "model._target_=collections.OrderedDict", "model.inputs={x:{shape:[4]}}"],
        "model._target_='collections.OrderedDict' returned OrderedDict, not a torch.nn.Module; point model._target_ at a callable that builds the model",
    ),
    (
        [
            "model=target",
            "model._target_=torch.nn.Linear",
            "model.kwargs={in_features:8,out_features:2}",
            "model.inputs={input:{shape:[4]}}",
        ],
        "model._target_='torch.nn.Linear': a forward on model.inputs (input[2, 4] float32) raised RuntimeError: a and b must have same reduction dim, but got [2, 4] X [8, 2].; fix the inputs' shapes or dtypes",
    ),
    (
        ["model=target", "model._target_=torch.nn.Linear", "model.inputs={input:{shape:[8]}}", "parallel=pipeline"],
        "parallel.layout=pipeline cannot split model._target_='torch.nn.Linear' into pipeline stages by itself: give the module names where a stage begins, e.g. parallel.pp_split=[blocks.2]; or use parallel=ddp or parallel=fsdp",
    ),
    (
        [
            "model=target",
            "model._target_=torch.nn.Linear",
            "model.inputs={input:{shape:[8]}}",
            "model.loss=cross_entropy",
        ],
        "model.loss=cross_entropy compares the output with model.target, which is not set; set e.g. model.target={{shape:[],dtype:int64,high:1000}}",
    ),
    (["precision=16"], "precision='16' is not one of auto, fp32, bf16, fp16, fp8; set e.g. precision=auto"),
    (
        ["model=nope"],
        "model=nope is not a recipe in {recipes}/model; available: deepseek_v3, gpt_125m, gpt_1_3b, gpt_350m, llama3_405b, llama3_70b, llama3_8b, mixtral_8x7b, mlp, target, tiny_gpt, tiny_llama, tiny_moe",
    ),
    (
        ["batch.micro=["],
        "cannot parse override 'batch.micro=['; write key=value, lists as key=[a,b], and quote values with special characters",
    ),
    (["sweep.world_sizes=[1,x]"], "sweep.world_sizes=[1,x] must be a list of integers; e.g. sweep.world_sizes=[1,2]"),
    (["sweep.world_sizes=abc"], "sweep.world_sizes=abc must be a list of integers; e.g. sweep.world_sizes=[1,2]"),
    (
        ["sweep.world_sizes=[]"],
        "sweep.world_sizes=[] is empty; list the sizes to measure, e.g. sweep.world_sizes=[1,2]",
    ),
    (
        ["sweep.world_sizes=[0,2]"],
        "sweep.world_sizes=[0, 2] holds 0; every size must be a positive integer, e.g. sweep.world_sizes=[1,2]",
    ),
    (
        ["sweep.world_sizes=[2,2]"],
        "sweep.world_sizes=[2, 2] repeats a size; list each once, e.g. sweep.world_sizes=[2]",
    ),
    (["sweep.threshold=abc"], "sweep.threshold=abc must be a number; e.g. sweep.threshold=0.8"),
    (["sweep.threshold=1.5"], "sweep.threshold=1.5 must be in (0, 1]; set e.g. sweep.threshold=0.8"),
    (
        ["sweep.warmup_steps=30"],
        "sweep.warmup_steps=30 leaves no measured step of sweep.steps=30; set sweep.steps above 30, e.g. sweep.steps=50",
    ),
    (["sweep.steps=0"], "sweep.steps=0 must be a positive integer; set e.g. sweep.steps=30"),
    (
        ["sweep.name=a b"],
        "sweep.name='a b' must be letters, digits, '.', '_' or '-' (≤100, not starting with '.' or '-'); set e.g. sweep.name=gpt-ddp-1",
    ),
    (
        ["sweep.name=../x"],
        "sweep.name='../x' must be letters, digits, '.', '_' or '-' (≤100, not starting with '.' or '-'); set e.g. sweep.name=gpt-ddp-1",
    ),
    (
        ["model.n_heads=5"],
        "model.d_model=128 is not divisible by model.n_heads=5; pick heads that divide the width, e.g. model.n_heads=4",
    ),
    (
        ["model=tiny_llama", "model.n_kv_heads=3"],
        "model.n_heads=8 is not a multiple of model.n_kv_heads=3; each kv head serves a whole group of query heads: pick n_kv_heads dividing n_heads, e.g. model.n_kv_heads=2",
    ),
    (
        ["model=tiny_llama", "model.d_model=120", "model.n_heads=8"],
        "model.d_model=120 ÷ model.n_heads=8 = 15, an odd head width; RoPE rotates pairs of dimensions: pick a width and head count giving an even head width, or set model.head_dim",
    ),
    (
        ["model.n_kv_heads=2"],
        "model.n_kv_heads=2 applies to arch=llama only (grouped-query attention); remove it, or set model.arch=llama",
    ),
    (
        ["model=tiny_llama", "model.ffn_hidden=0"],
        "model.ffn_hidden=0 must be a positive integer; set e.g. model.ffn_hidden=8",
    ),
    (["model.arch=cnn"], "model.arch='cnn' is not one of gpt, mlp, llama; set e.g. model.arch=gpt"),
    (["model.seq_len=1.5"], "model.seq_len=1.5 must be an integer; e.g. model.seq_len=64"),
    (["model.vocab_size=1"], "model.vocab_size=1 must be at least 2; set e.g. model.vocab_size=256"),
    (["optim.lr=-1"], "optim.lr=-1.0 must be a positive number; set e.g. optim.lr=0.001"),
    (
        ["optim.lr_scaling=cubic"],
        "optim.lr_scaling='cubic' is not one of none, linear, sqrt; set e.g. optim.lr_scaling=none",
    ),
    (["optim.beta2=1.0"], "optim.beta2=1.0 must be in [0, 1); set e.g. optim.beta2=0.9"),
    (["parallel=ddp,ddp"], "'parallel=ddp,ddp' lists a value twice; list each value once"),
    (
        ["parallel=pipeline,tp", "sweep.world_sizes=[3]"],
        "no combination can run: pipeline at world size 3: model.n_layers=2 is not divisible by pipeline stages pp(3) × v(1) = 3; change model.n_layers, the world size or parallel.virtual_stages (and 1 more)",
    ),
    (
        ["parallel.layout=zero9"],
        "parallel.layout='zero9' is not one of ddp, fsdp, pipeline, tp, dp_pp, fsdp_tp, fsdp_pp, fsdp_tp_pp, fsdp_ep, ddp_ep, hsdp, fsdp_cp, fsdp_tp_cp, fsdp_tp_pp_cp; set e.g. parallel.layout=ddp",
    ),
    (["cluster.device_name=[1]"], "cluster.device_name=[1] must be a string; e.g. cluster.device_name=cpu"),
    (
        ["cluster.peak_flops_per_device=0"],
        "cluster.peak_flops_per_device=0.0 must be a positive number; set e.g. cluster.peak_flops_per_device=312000000000000.0",
    ),
    (["data=file"], "data.kind=file needs data.path; set data.path=/path/to/tokens.bin"),
    (
        ["data=file", "data.path=/nonexistent/tokens.bin"],
        "data.path='/nonexistent/tokens.bin' is not a readable file; point it at a token file",
    ),
    (
        ["data.path=/x.bin"],
        "data.path is set but data=synthetic ignores it; add data=file (data=file data.path=/x.bin)",
    ),
    (
        ["sweep.world_sizes=1,2"],
        "sweep.world_sizes=1,2 sweeps sweep.world_sizes over single values, but sweep.world_sizes is a list; write 'sweep.world_sizes=[1,2]' (quoted: zsh rejects the bare form)",
    ),
    (
        ["cluster.setup=a,b"],
        "cluster.setup=a,b sweeps cluster.setup over single values, but cluster.setup is a list; write 'cluster.setup=[a,b]' (quoted: zsh rejects the bare form)",
    ),
    (["batch=[1]"], "batch=[1]: a config group takes one option name, e.g. batch=default; options: default"),
    (
        ["parallel={a:1}"],
        "parallel={{a:1}}: a config group takes one option name, e.g. parallel=ddp; options: ddp, ddp_ep, dp_pp, fsdp, fsdp_cp, fsdp_ep, fsdp_pp, fsdp_tp, fsdp_tp_cp, fsdp_tp_pp, fsdp_tp_pp_cp, hsdp, pipeline, tp",
    ),
    (
        ["batch.global_batch=24"],
        "world size 2: batch.global_batch=24 is not divisible by batch.micro(8) × dp(2) = 16; choose a multiple of 16 or another batch.micro",
    ),
    (
        ["batch.global_batch=16", "batch.accum=4", "sweep.world_sizes=[1]"],
        "world size 1: batch.global_batch=16 ≠ batch.micro(8) × batch.accum(4) × dp(1) = 32; set batch.accum=2 or leave it at 1 to derive it",
    ),
    (
        [
            "parallel=pipeline",
            "parallel.schedule=interleaved_1f1b",
            "model.n_layers=4",
            "parallel.microbatches=5",
            "batch.micro=10",
            "sweep.world_sizes=[2]",
        ],
        "world size 2: parallel.microbatches=5 is not a multiple of its 2 rounds of pp=2 that interleaved_1f1b runs; use a multiple of pp, e.g. parallel.microbatches=4",
    ),
    (
        ["parallel=tp", "sweep.world_sizes=[3]"],
        "world size 3: model.n_heads=4 is not divisible by tp=3; tensor parallel splits it across ranks: choose a tp that divides 4",
    ),
    (
        ["parallel=fsdp_tp", "sweep.world_sizes=[2,3]"],
        "world size 3: world size 3 is not a multiple of parallel.tp=2; dp × tp × pp must equal the world size: pick sizes that are multiples of 2",
    ),
    (
        ["parallel=pipeline", "sweep.world_sizes=[2]", "parallel.microbatches=1"],
        "world size 2: parallel.microbatches=1 < pp=2 pipeline ranks: a schedule needs at least one microbatch per rank; set parallel.microbatches=2 or more",
    ),
    (
        ["parallel=pipeline", "sweep.world_sizes=[2]", "batch.micro=6"],
        "world size 2: batch.micro=6 is not divisible by parallel.microbatches=4; each micro-batch is split into that many pipeline microbatches",
    ),
    (["run.world_size=0"], "run.world_size=0 must be a positive integer; set e.g. run.world_size=1"),
    (["sweep.search=binary"], "sweep.search='binary' is not one of grid, adaptive; set e.g. sweep.search=grid"),
    (
        ["sweep.policy=cheapest"],
        "sweep.policy='cheapest' is not one of max_efficient, min_cost, fastest_within_budget; set e.g. sweep.policy=max_efficient",
    ),
    (
        ["sweep.policy=fastest_within_budget"],
        "sweep.policy=fastest_within_budget needs the tokens the run will train on; set e.g. sweep.token_budget=2e11",
    ),
    (
        ["sweep.policy=fastest_within_budget", "sweep.token_budget=1e9"],
        "sweep.policy=fastest_within_budget needs a budget; set sweep.budget_device_hours=10000 and/or sweep.budget_usd=50000",
    ),
    (
        ["sweep.budget_usd=100"],
        "sweep.budget_usd=100 needs a price; set e.g. cluster.usd_per_device_hour=2.5 (or budget in sweep.budget_device_hours)",
    ),
    (["sweep.token_budget=-5"], "sweep.token_budget=-5.0 must be a positive number; set e.g. sweep.token_budget=2e11"),
    (["cluster.spot_discount=1"], "cluster.spot_discount=1.0 must be in [0, 1); set e.g. cluster.spot_discount=0.6"),
    (
        ["cluster.inter_link=carrier_pigeon"],
        "cluster.inter_link='carrier_pigeon' is not one of nvlink, pcie, ib400, ib200, eth100, eth10, nvlink3, nvlink4, nvlink5, ib_ndr, ib_xdr, roce400; set e.g. cluster.inter_link=nvlink",
    ),
    (
        ["cluster=devcluster", "sweep.search=adaptive", "sweep.pack=true"],
        "sweep.pack=true runs every size in one allocation, but sweep.search=adaptive picks each size from the last one's result; use one of them",
    ),
    # job=command (issue 22): caught at plan time, before any folder.
    (
        ["job=command"],
        "job.argv=[] names no program; give the command as a list of words, e.g. job.argv=[python,train.py,--lr,3e-4]",
    ),
    (
        ["job=command", "job.argv=[]"],
        "job.argv=[] names no program; give the command as a list of words, e.g. job.argv=[python,train.py,--lr,3e-4]",
    ),
    (["job=command", "job.argv=python"], "job.argv=python must be a list of strings; e.g. job.argv=['a','b']"),
    (
        ["job=command", "job.argv=[[python]]"],
        "job.argv=[['python']] must be a list of strings; e.g. job.argv=['a','b']",
    ),
    (
        ["job=command", "job.argv=[python,-c,'${trial.word_size}']"],
        "job.argv[2]='${{trial.word_size}}': unknown interpolation key ${{trial.word_size}}; a command takes ${{trial.KEY}} with KEY one of trial.world_size, trial.nodes, trial.gpus_per_node, trial.micro, trial.accum, trial.global_batch, trial.dp, trial.tp, trial.pp, trial.steps, trial.warmup_steps, trial.dir, trial.id, trial.repeat, the aliases batch.micro, batch.accum, batch.global_batch, parallel.tp, parallel.pp, or a config value such as ${{model.seq_len}}",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.env={OUT: '${nope}'}"],
        "job.env.OUT='${{nope}}': unknown interpolation key ${{nope}}; a command takes ${{trial.KEY}} with KEY one of trial.world_size, trial.nodes, trial.gpus_per_node, trial.micro, trial.accum, trial.global_batch, trial.dp, trial.tp, trial.pp, trial.steps, trial.warmup_steps, trial.dir, trial.id, trial.repeat, the aliases batch.micro, batch.accum, batch.global_batch, parallel.tp, parallel.pp, or a config value such as ${{model.seq_len}}",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.metrics=regex"],
        "job.metrics=regex needs job.pattern, a regex with a named group (tokens_per_s, tokens_per_s_per_gpu, samples_per_s, step_s), e.g. job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.metrics=regex", "job.pattern='tok/s: ([0-9.]+)'"],
        "job.pattern='tok/s: ([0-9.]+)' names no group the launcher reads; name one of tokens_per_s, tokens_per_s_per_gpu, samples_per_s, step_s, e.g. 'tok/s: (?P<tokens_per_s>[0-9.]+)'",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.metrics=regex", "job.pattern='(?P<tokens_per_s>[0-9.]+'"],
        "job.pattern='(?P<tokens_per_s>[0-9.]+' is not a regex (missing ), unterminated subpattern at position 0); fix it",
    ),
    (
        ["job=command", "job.launch=srun", "job.argv=[torchrun,'--nproc-per-node=2',train.py]"],
        "job.launch=srun starts one task per rank, but job.argv starts 'torchrun', which starts ranks itself; set job.launch=torchrun and drop torchrun from job.argv (or job.launch=none)",
    ),
    (
        ["job=command", "job.launch=srun", "job.argv=[python,-m,torch.distributed.run,train.py]"],
        "job.launch=srun starts one task per rank, but job.argv starts 'python -m torch.distributed.run', which starts ranks itself; set job.launch=torchrun and drop torchrun from job.argv (or job.launch=none)",
    ),
    (
        ["job=command", "job.launch=mpirun"],
        "job.launch='mpirun' is not one of torchrun, srun, none; set e.g. job.launch=torchrun",
    ),
    (
        ["job=command", "job.metrics=wandb"],
        "job.metrics='wandb' is not one of meter, regex, torchtitan, megatron, hf, lightning; set e.g. job.metrics=meter",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.env={RANK: '3'}"],
        "job.env sets RANK, which the launcher sets for each rank; remove it from job.env",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.env={LAUNCHER_METER_FILE: /tmp/m}"],
        "job.env sets LAUNCHER_METER_FILE, which the launcher sets for each rank; remove it from job.env",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.tokens_per_sample=0"],
        "job.tokens_per_sample=0 must be a positive integer; set e.g. job.tokens_per_sample=4096",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.flops_per_token=-1"],
        "job.flops_per_token=-1.0 must be a positive number; set e.g. job.flops_per_token=6.2e9",
    ),
    (
        ["job=command", "job.argv=[python,-c,pass]", "job.probe_bytes=2"],
        "job.probe_bytes=2 must be at least 4; set e.g. job.probe_bytes=67108864",
    ),
    (["job=command", "job.probe=maybe"], "job.probe=maybe must be true or false; e.g. job.probe=true"),
    (
        ["job=command", "job.model_describes_program=maybe"],
        "job.model_describes_program=maybe must be true or false; e.g. job.model_describes_program=false",
    ),
]

# Other commands: (argv, message); each exits 2 with the one line and writes nothing.
COMMAND_CASES = [
    (
        ["plan", "--gpus", "8..4"],
        "--gpus '8..4' is not a size range; write e.g. --gpus 8..16384 (doubling) or --gpus 8,16,24",
    ),
    (
        ["plan", "--gpus", "a,b"],
        "--gpus 'a,b' is not a size range; write e.g. --gpus 8..16384 (doubling) or --gpus 8,16,24",
    ),
    (
        ["plan", "--gpus", "1..1180591620717411303424"],
        "--gpus '1..1180591620717411303424' names 71 sizes; at most 64, e.g. a doubling range 8..16384",
    ),
    (
        ["plan", "model=mlp"],
        "launcher plan without a measured sweep needs the device's peak: cluster.device_name='cpu' is not in the peak table, so set cluster.peak_flops_per_device (e.g. cluster=example_gpu_site), or pass --from results/<sweep-id>",
    ),
    (
        ["plan", "cluster=example_gpu_site", "--output", "plan.xlsx"],
        "--output 'plan.xlsx' must end in .csv or .parquet (the format follows the suffix); e.g. --output plan.csv",
    ),
    (
        ["plan", "cluster=example_gpu_site", "--assume-mfu", "2"],
        "--assume-mfu 2.0 must be in (0, 1]; e.g. --assume-mfu 0.4",
    ),
    (
        ["plan", "--from", "/nonexistent"],
        "--from '/nonexistent' is not a sweep folder (no sweep.json); pass results/<sweep-id>",
    ),
    (
        ["plan", "--from", "/nonexistent", "model=mlp"],
        "--from plans the measured recipe on the measured hardware, so 'model=mlp' cannot apply; only sweep.* (policy, threshold, budgets) and cluster.usd_per_device_hour / cluster.spot_discount can",
    ),
    (["analyze", "/nonexistent.csv"], "table '/nonexistent.csv' is not a file; pass a .csv or .parquet results table"),
    (["analyze", "{table}", "--threshold", "0"], "--threshold 0.0 must be in (0, 1]; e.g. --threshold 0.8"),
    (
        ["analyze", "{table}", "--policy", "fastest_within_budget"],
        "--policy fastest_within_budget needs --budget-gpu-hours and/or --budget-usd",
    ),
    (
        ["analyze", "{table}", "--budget-usd", "5", "--policy", "fastest_within_budget"],
        "--budget-usd 5 needs a price; add --usd-per-gpu-hour, e.g. 2.5",
    ),
    (["analyze", "{table}", "--usd-per-gpu-hour", "-2"], "--usd-per-gpu-hour -2 must be a positive number"),
    (
        ["analyze", "{table}", "--spot-discount", "1.5"],
        "--spot-discount 1.5 must be in [0, 1); e.g. --spot-discount 0.6",
    ),
    (
        ["analyze", "{garbage}"],
        "the table has no device-count column (one of gpus, world_size, devices, ranks, nodes); it has: hello",
    ),
    (["report", "/nonexistent"], "'/nonexistent' is not a sweep folder (no sweep.json); pass results/<sweep-id>"),
]


@pytest.mark.parametrize("argv, message", COMMAND_CASES, ids=[" ".join(c[0]) for c in COMMAND_CASES])
def test_other_commands_refuse_bad_input_with_one_line(argv, message, tmp_path, capsys, monkeypatch):
    table, garbage = tmp_path / "t.csv", tmp_path / "g.csv"
    table.write_text("gpus,hours\n8,72\n16,68\n")
    garbage.write_text("hello\n1\n")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([a.format(table=table, garbage=garbage) for a in argv]) == 2
    assert capsys.readouterr().err == f"launcher: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("overrides, message", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_one_line_exit_2_nothing_created(overrides, message, tmp_path, capsys):
    from launcher.config.compose import PACKAGED_RECIPES

    results = tmp_path / "results"
    assert main(["sweep", *overrides, f"sweep.results_dir={results}"]) == 2
    err = capsys.readouterr().err
    assert err == f"launcher: error: {message.format(recipes=PACKAGED_RECIPES)}\n"
    assert not results.exists()


def test_launcher_run_checks_a_target_model_before_any_job(tmp_path, capsys):
    """`launcher run` prepares its one trial as a sweep does: the same one line, exit 2, no folder."""
    results = tmp_path / "results"
    argv = [
        "run",
        "model=target",
        "model._target_=nopkg.build",
        "model.inputs={x:{shape:[4]}}",
        f"sweep.results_dir={results}",
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "launcher: error: model._target_='nopkg.build' does not import: No module named "
        "'nopkg'; put its package on PYTHONPATH (locally) or in cluster.setup/cluster.env (Slurm)\n"
    )
    assert not results.exists()


def test_a_program_missing_here_is_a_warning_only(tmp_path, capsys):
    """Compute nodes may have what the submitting host lacks: on Slurm one warning line, and the plan goes on."""
    from launcher.config.compose import compose_config

    compose_config(["job=command", "job.argv=[python,/nonexistent/train.py]", "cluster=slurm"])
    compose_config(["job=command", "job.argv=[no-such-program-here,--x]"])
    assert capsys.readouterr().err.splitlines() == [
        "launcher: warning: job.argv[1] '/nonexistent/train.py' does not exist on this host",
        "launcher: warning: job.argv[0] 'no-such-program-here' is not found on this host (PATH)",
    ]


def test_a_script_missing_here_stops_a_local_sweep_before_anything_exists(tmp_path, monkeypatch, capsys):
    """Issue 31 item 6: cluster=local runs the command on this host, so `python trian.py` (a typo) cannot start in
    any trial: one line naming the script and the folder it is looked up from, exit 2, no sweep folder, and no
    warning line before it. Fails if refuse_unrunnable does not call validate_job.refuse_missing_script for a
    local sweep (the sweep then ran every trial to a `failed` row), or if check_job still warns of it locally."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    results = tmp_path / "results"
    argv = ["job=command", "job.argv=[python,trian.py,--lr,1]", f"sweep.results_dir={results}"]
    assert main(["sweep", *argv]) == 2
    assert capsys.readouterr().err == (
        f"launcher: error: job.argv[1] 'trian.py' does not exist on this host, where cluster=local runs it from "
        f"{tmp_path}; give the script's path from that folder, or an absolute one\n"
    )
    assert main(["run", *argv]) == 2
    assert "job.argv[1] 'trian.py' does not exist on this host" in capsys.readouterr().err
    assert not results.exists()
    # The script that is there plans, without a line (on Slurm the missing one is the warning above).
    from launcher.run.sweep import prepare_sweep

    assert len(prepare_sweep(["job=command", "job.argv=[python,train.py,--lr,1]"]).items) == 2
    assert capsys.readouterr().err == ""


QUOTING = [
    (
        "job.pattern=tok/s: (?P<tokens_per_s>[0-9.]+)",
        "\"job.pattern='tok/s: (?P<tokens_per_s>[0-9.]+)'\"",
        "tok/s: (?P<tokens_per_s>[0-9.]+)",
    ),
    ("job.argv=[python,-c,--lr=1]", "\"job.argv=[python,-c,'--lr=1']\"", ["python", "-c", "--lr=1"]),
    (
        "job.argv=[python,-c,--ws=${trial.world_size}]",
        "'job.argv=[python,-c,\"--ws=${trial.world_size}\"]'",
        ["python", "-c", "--ws=${trial.world_size}"],
    ),
    (
        "job.pattern=it's (?P<step_s>[0-9.]+)",
        "\"job.pattern='it\\'s (?P<step_s>[0-9.]+)'\"",
        "it's (?P<step_s>[0-9.]+)",
    ),
]


@pytest.mark.parametrize(("override", "shown", "meant"), QUOTING)
def test_an_unparsable_override_is_shown_quoted_as_it_parses(override, shown, meant, tmp_path, capsys):
    """Issue 31 item 11: "quote values with special characters" shows how, on the user's own override: Hydra's
    quotes around the value (or each list word that needs them) inside the shell's; where the value holds `$`, the
    shell's single quotes (its double ones would expand `${trial.…}`). Typed into a shell (shlex.split here), the
    example composes to the value meant. Fails if messages.unparsable drops the example, or quotes it so that
    Hydra or the shell reads another value."""
    from launcher.config.compose import compose_config

    results = tmp_path / "results"
    assert main(["sweep", "job=command", override, f"sweep.results_dir={results}"]) == 2
    assert capsys.readouterr().err == (
        f"launcher: error: cannot parse override {override!r}; write key=value, lists as key=[a,b], and quote "
        f"values with special characters, e.g. {shown}\n"
    )
    assert not results.exists()
    (typed,) = shlex.split(shown)
    key = typed.split("=", 1)[0]
    regex = ["job.metrics=regex"] if key == "job.pattern" else []
    job = compose_config(["job=command", "job.argv=[python,-c,pass]", *regex, typed]).job
    assert getattr(job, key.split(".")[1]) == meant


def test_a_typo_that_quoting_does_not_mend_gets_no_example(capsys):
    """An unbalanced bracket is a typo, not a value to quote: the line stays without an example, as it does for a
    value holding both `$` and a single quote, which neither form of quoting carries through a shell. Fails if
    messages._quoted offers "batch.micro='['" or a form the shell would change."""
    from launcher.config.messages import unparsable

    assert unparsable("batch.micro=[").endswith("and quote values with special characters")
    assert unparsable("job.pattern=x $ y'z").endswith("and quote values with special characters")


def test_a_sweep_over_lists_is_still_a_sweep():
    """The comma-sweep refusal is for single values of a list key; a sweep of lists is meant."""
    variants = expand(["sweep.world_sizes=[1,2],[4]"])
    assert [v.overrides for v in variants] == [("sweep.world_sizes=[1,2]",), ("sweep.world_sizes=[4]",)]


def test_bad_input_through_the_console_script(tmp_path):
    """The installed entry point, not just main(): exit status 2, one line, no folder."""
    proc = subprocess.run(
        [sys.executable, "-m", "launcher", "sweep", "batch.micro=0", f"sweep.results_dir={tmp_path / 'r'}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "launcher: error: batch.micro=0 must be a positive integer; set e.g. batch.micro=8"
    ]
    assert proc.stdout == ""
    assert not (tmp_path / "r").exists()


def test_existing_sweep_name_is_refused_and_kept(tmp_path, capsys):
    kept = tmp_path / "taken" / "results.csv"
    kept.parent.mkdir()
    kept.write_text("precious\n")
    assert main(["sweep", "sweep.name=taken", f"sweep.results_dir={tmp_path}"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert kept.read_text() == "precious\n"
