"""Every command README.md and docs/*.md show is run by a named test, or says why it cannot be.

A command is a line of a ```bash block (continuation lines joined, a trailing comment dropped) or
an inline `code span` that starts as one: `launcher …`, `VAR=… launcher …`, `python -m
benchmarks.…`, `python -m pytest`, `pip install …`. A bare `launcher <verb>` in prose names the
verb, not a command. REGISTRY maps each command to the tests that run it: every test named must
exist, and its source (with the fixtures, helpers and constants of its module and conftest.py that
it uses) must hold the command's verb and each distinctive argument listed, which must be in the
command too. A command nobody can run in CI (a GPU, a real site's queue) is ShownOnly, with why.
Also: README stays under 12,000 characters, links every docs/ page, and every relative link
resolves."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher import cli

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
TESTS = REPO / "tests"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True, kw_only=True)
class Ran:
    """A command some tests run."""

    tests: tuple[str, ...]
    """`file.py::test_name` (or `file.py::Class::test_name`), found anywhere under tests/."""
    args: tuple[str, ...] = ()
    """What makes this command this one: each is in the command and in a named test's source."""


@dataclass(frozen=True, kw_only=True)
class ShownOnly:
    """A command no test can run in CI."""

    reason: str
    """Why not, in a sentence."""


# A command's start: optional VAR=value words, then launcher, python -m …, or pip.
_COMMAND = re.compile(
    r"^(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?"
    r"(?:launcher(?:\s|$)|python3? -m (?:benchmarks\.|pytest|venv)|pip (?:install|wheel))"
)


def _normal(text: str) -> str:
    return " ".join(text.split())


def _bash_commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for each command of each ```bash block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].strip() != "```bash":
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            start, command = i + 1, lines[i]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i]
            command = re.sub(r"\s+#\s.*$", "", command).strip()
            if command and not command.startswith("#"):
                out.append((start, _normal(command)))
            i += 1
        i += 1
    return out


def _inline_commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for each inline code span that starts as a command and is more than a verb's name."""
    prose = re.sub(r"```.*?```", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    out = []
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose):
        span = _normal(m.group(1))
        if not _COMMAND.match(span) or re.fullmatch(r"launcher(?: \w+)?", span):
            continue
        out.append((prose.count("\n", 0, m.start()) + 1, span))
    return out


def shown_commands() -> list[tuple[str, int, str]]:
    """(doc, line, command) for every command README.md and docs/*.md show."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for line, command in sorted(_bash_commands(text) + _inline_commands(text)):
            found.append((str(doc.relative_to(REPO)), line, command))
    return found


def verb(command: str) -> str:
    """What the last program of a command runs: the launcher verb (or its first option), the
    module run by `python -m`, or `pip`."""
    last = command.split(" && ")[-1].split()
    while last and re.match(r"[A-Z_]+=", last[0]):
        last = last[1:]
    program = last[0].rsplit("/", 1)[-1]
    if program == "launcher":
        return last[1] if len(last) > 1 else "launcher"
    if program.startswith("python") and last[1:2] == ["-m"]:
        return last[2].rsplit(".", 1)[-1]
    return program


# Each command the docs show → the tests that run it. Where a doc shows a placeholder (cluster=mysite,
# results/<sweep-id>, measured.csv), the tests run the same command on the dev cluster or a folder of theirs.
_SLURM_STATUS = "test_slurm_cluster.py::test_detach_then_collect"
REGISTRY: dict[str, Ran | ShownOnly] = {
    # README.md: set-up (CI runs the second; the first is its install plus the default sweep)
    "python3 -m venv .venv && .venv/bin/pip install -e '.[cpu]' && .venv/bin/launcher sweep": Ran(
        tests=(
            "test_readme.py::test_ci_runs_the_readme_test_command",
            "test_sweep_e2e.py::test_sweep_writes_table_with_one_row_per_size",
        ),
        args=("pip install -e",),
    ),
    "python3 -m venv .venv && .venv/bin/pip install -e '.[cpu,test]' && .venv/bin/launcher cluster up --containers && "
    ".venv/bin/ruff check && .venv/bin/ruff format --check && "
    ".venv/bin/python -m pytest": Ran(
        tests=("test_readme.py::test_ci_runs_the_readme_test_command",),
        args=("pip install -e", "launcher cluster up --containers", "python -m pytest"),
    ),
    "python -m pytest": Ran(tests=("test_readme.py::test_ci_runs_the_readme_test_command",)),
    "pip install -e .": Ran(tests=("test_readme.py::test_ci_runs_the_readme_test_command",), args=("install -e",)),
    "pip install '.[cpu]'": Ran(
        tests=("test_install.py::test_installed_package_runs_a_sweep_from_any_folder",), args=("install",)
    ),
    "pip wheel .": Ran(tests=("test_install.py::test_the_wheel_carries_every_module_recipe_and_template",)),
    # README.md: bring your training; docs/own-command.md
    "launcher sweep --recipes my_recipes job=my_train sweep.world_sizes='[1,2]'": Ran(
        tests=("test_command_sweep.py::test_rows_equal_the_programs_own_figure",),
        args=("--recipes", "job=my_train", "[1,2]"),
    ),
    "launcher plan --from results/<sweep-id> --gpus 4": Ran(
        tests=("test_command_plan_from.py::test_plan_from_1_and_2_nodes_predicts_the_4_node_row",),
        args=("--from", "--gpus"),
    ),
    # README.md: usage
    "launcher sweep": Ran(tests=("test_sweep_e2e.py::test_sweep_writes_table_with_one_row_per_size",)),
    "launcher sweep model=mlp sweep.world_sizes='[1,2]' batch.micro=16 batch.accum=2 optim.lr_scaling=linear": Ran(
        tests=("test_doc_commands.py::test_weak_scaling_of_the_mlp_with_a_linear_learning_rate",),
        args=("model=mlp", "[1,2]", "batch.micro=16", "batch.accum=2", "optim.lr_scaling=linear"),
    ),
    "launcher sweep batch.global_batch=64 sweep.world_sizes='[1,2,4]'": Ran(
        tests=("test_doc_commands.py::test_strong_scaling_derives_the_accumulation_per_size",),
        args=("batch.global_batch=64", "[1,2,4]"),
    ),
    "launcher sweep parallel=ddp,fsdp batch.accum=1,4": Ran(
        tests=("test_doc_commands.py::test_a_comma_sweep_of_layouts_and_accumulation_is_every_combination",),
        args=("parallel=ddp,fsdp", "batch.accum=1,4"),
    ),
    "launcher run run.world_size=2 run.steps=200": Ran(
        tests=("test_site_launch_run.py::test_run_prints_its_figures_checkpoints_and_logs",),
        args=("run.world_size=2", "run.steps"),
    ),
    "launcher run --from results/<sweep-id> run.steps=20000": Ran(
        tests=("test_run_from_sweep.py::test_run_from_a_sweep_runs_the_size_and_layout_it_recommends",),
        args=("--from", "run.steps"),
    ),
    "launcher run --from results/<sweep-id> run.steps=20000 --dry-run": Ran(
        tests=(
            "test_run_from.py::test_a_slurm_sweep_runs_its_recommended_nodes_requeued_in_the_dry_run_script",
            "test_run_from.py::test_the_run_dry_run_prints_the_choice_and_the_chosen_ranks_and_runs_nothing",
        ),
        args=("--from", "run.steps", "--dry-run"),
    ),
    "launcher run --from plan.json run.steps=20000": Ran(
        tests=("test_run_from_saved_plan.py::test_run_from_a_saved_search_plan_trains_its_best_candidate",),
        args=("--from", "plan.json", "run.steps"),
    ),
    "launcher run --from plan.json": Ran(
        tests=("test_run_from_saved_plan.py::test_run_from_a_saved_search_plan_trains_its_best_candidate",),
        args=("--from", "plan.json"),
    ),
    "launcher run --from plan.json run.steps=20000 --dry-run": Ran(
        tests=("test_run_from_plan.py::test_run_from_a_search_plan_runs_its_best_candidate_and_says_what_and_why",),
        args=("--from", "plan.json", "run.steps", "--dry-run"),
    ),
    "launcher plan --search model=gpt_1_3b cluster=example_gpu_site --gpus 8..64 --output plan.csv": Ran(
        tests=("test_run_from_plan.py::test_a_slurm_search_plan_runs_its_nodes_requeued_in_the_dry_run_script",),
        args=("--search", "model=gpt_1_3b", "cluster=example_gpu_site", "8..64", "--output", "plan.csv"),
    ),
    "launcher run run.world_size=2 --dry-run": Ran(
        tests=("test_doc_commands.py::test_a_local_run_dry_run_prints_each_ranks_command_and_creates_nothing",),
        args=("run.world_size=2", "--dry-run"),
    ),
    "launcher plan model=gpt_1_3b parallel=fsdp cluster=example_gpu_site --gpus 8..16384": Ran(
        tests=("test_doc_commands.py::test_a_plan_of_a_doubling_range_predicts_every_size",),
        args=("model=gpt_1_3b", "parallel=fsdp", "cluster=example_gpu_site", "--gpus", "8..16384"),
    ),
    "launcher plan --from results/<sweep-id> --gpus 1..64": Ran(
        tests=("test_plan_output.py::test_plan_from_a_strong_scaling_sweep_refuses_what_the_sweep_refuses",),
        args=("--from", "--gpus"),
    ),
    "launcher status results/<sweep-id>": Ran(
        tests=("test_corrupt_files.py::test_status_shows_the_damaged_file", _SLURM_STATUS)
    ),
    "launcher collect results/<sweep-id>": Ran(
        tests=("test_corrupt_files.py::test_a_damaged_file_is_a_corrupt_row_naming_it", _SLURM_STATUS)
    ),
    "launcher cancel results/<sweep-id>": Ran(
        tests=("test_cancel_slurm.py::test_launcher_cancel_stops_a_detached_sweep_from_another_shell",)
    ),
    "launcher report results/<sweep-id>": Ran(
        tests=("test_corrupt_files.py::test_the_report_says_which_trials_the_model_left_out",)
    ),
    "launcher sweep model=mlp --cfg": Ran(
        tests=("test_cli.py::test_cfg_prints_the_resolved_config_and_runs_nothing",), args=("model=mlp", "--cfg")
    ),
    "launcher --info": Ran(tests=("test_cli.py::test_info_lists_groups_options_and_defaults",), args=("--info",)),
    "launcher --info parallel": Ran(
        tests=("test_info_group.py::test_info_parallel_prints_every_field_its_type_default_and_doc",),
        args=("--info", "parallel"),
    ),
    "launcher sweep --help": Ran(tests=("test_cli.py::test_every_verb_answers_help[sweep]",), args=("--help",)),
    "launcher sweep cluster=slurm sweep.nodes='[1,2,4]'": Ran(
        tests=("test_slurm_cluster.py::test_sweep_over_nodes_1_2_4",), args=("sweep.nodes", "[1,2,4]")
    ),
    "launcher cluster up": Ran(
        tests=(
            "test_readme.py::test_ci_runs_the_readme_test_command",
            "test_devcluster_slurm.py::test_up_is_idempotent_and_fast",
        )
    ),
    # docs/own-model.md
    "PYTHONPATH=examples/resnet launcher sweep --recipes examples/resnet/recipes model=resnet parallel=ddp,fsdp "
    "'parallel.fsdp_units=[BasicBlock]'": Ran(
        tests=("test_examples.py::test_resnet_sweeps_at_1_and_2_ranks_in_samples_per_second",),
        args=("--recipes", "model=resnet", "parallel=ddp,fsdp", "parallel.fsdp_units=[BasicBlock]"),
    ),
    "PYTHONPATH=examples/hf_causal_lm launcher sweep --recipes examples/hf_causal_lm/recipes model=hf_llama": Ran(
        tests=("test_examples.py::test_hf_causal_lm_sweeps_at_1_and_2_ranks_in_tokens_per_second",),
        args=("--recipes", "hf_causal_lm", "model=hf_llama"),
    ),
    "PYTHONPATH=examples/resnet launcher sweep --recipes examples/resnet/recipes model=resnet data=dataset "
    "data._target_=resnet_example.data.make": Ran(
        tests=("test_examples.py::test_resnet_trains_on_its_dataset_by_target",),
        args=("--recipes", "model=resnet", "data=dataset", "data._target_=resnet_example.data.make"),
    ),
    # docs/recipes.md
    "launcher sweep sweep.world_sizes='[2,4]' parallel=fsdp,pipeline batch.accum=1,4": Ran(
        tests=("test_layout_sweep.py::test_layout_by_accumulation_sweep_runs_every_valid_combination",),
        args=("sweep.world_sizes", "[2,4]", "parallel=fsdp,pipeline", "batch.accum=1,4"),
    ),
    "launcher sweep ... --cfg": Ran(
        tests=("test_cli.py::test_cfg_prints_the_resolved_config_and_runs_nothing",), args=("--cfg",)
    ),
    "launcher sweep --recipes DIR --info": Ran(
        tests=("test_recipes_path.py::test_info_marks_the_users_options",), args=("--recipes", "--info")
    ),
    # docs/slurm.md
    "launcher sweep cluster=mysite sweep.nodes='[1,2,4,8]'": Ran(
        tests=("test_slurm_cluster.py::test_sweep_over_nodes_1_2_4",), args=("sweep.nodes",)
    ),
    "launcher sweep cluster=mysite sweep.nodes='[1,2]' sweep.repeats=64 sweep.array_throttle=4": Ran(
        tests=("test_slurm_cluster.py::test_repeats_of_a_size_are_one_array_job",),
        args=("sweep.nodes", "sweep.repeats", "sweep.array_throttle"),
    ),
    "launcher sweep sweep.repeats=auto sweep.target_ci=0.05": Ran(
        tests=("test_uncertainty.py::test_auto_repeats_a_size_until_its_interval_is_narrow",),
        args=("sweep.repeats=auto", "sweep.target_ci=0.05"),
    ),
    "launcher sweep cluster=mysite sweep.nodes='[1,2,4]' sweep.pack=true": Ran(
        tests=("test_slurm_cluster.py::test_pack_runs_every_trial_as_a_step_of_one_allocation",),
        args=("sweep.nodes", "sweep.pack=true"),
    ),
    "launcher sweep cluster=mysite sweep.nodes='[1,2,4]' --detach": Ran(
        tests=(_SLURM_STATUS,), args=("sweep.nodes", "--detach")
    ),
    "launcher sweep --resume results/<sweep-id>": Ran(
        tests=("test_slurm_cluster.py::test_killed_launcher_resumes_without_rerunning_done_trials",),
        args=("--resume",),
    ),
    "launcher run cluster=mysite cluster.nodes=4 --dry-run": Ran(
        tests=("test_render.py::test_run_dry_run_prints_and_writes_the_script_and_submits_nothing",),
        args=("cluster.nodes", "--dry-run"),
    ),
    # docs/containers.md
    "launcher run --recipes my_recipes cluster=mysite job=my_train cluster.nodes=2 --dry-run": Ran(
        tests=("test_container.py::test_run_dry_run_of_a_command_in_the_docs_site_recipe",),
        args=("--recipes", "cluster=mysite", "job=my_train", "--dry-run"),
    ),
    "launcher cluster up --containers": Ran(
        tests=("test_container_runtime.py::test_the_cluster_says_containers_are_on",), args=("--containers",)
    ),
    "launcher sweep --recipes my_recipes cluster=mysite sweep.nodes='[1,2,4]'": Ran(
        tests=("test_containers.py::test_builtin_trainer_in_the_image_at_1_and_2_nodes",),
        args=("--recipes", "sweep.nodes"),
    ),
    "launcher sweep cluster=devcluster sweep.nodes='[1,2,4]'": Ran(
        tests=("test_slurm_cluster.py::test_sweep_over_nodes_1_2_4",),
        args=("cluster=devcluster", "sweep.nodes", "[1,2,4]"),
    ),
    "launcher cluster up --gpus-per-node 4": Ran(
        tests=(
            "test_devcluster.py::test_stand_in_gpus_per_node",
            "test_binding_slurm.py::test_one_rank_per_stand_in_gpu_on_one_and_two_nodes",
        ),
        args=("--gpus-per-node 4",),
    ),
    "launcher cluster up --cpus-per-node 0.45 --link-rate 200mbit": Ran(
        tests=("test_bed_slurm.py::test_bed_in_place_then_a_2_node_x_2_task_sweep_on_it",),
        args=("--cpus-per-node 0.45", "--link-rate 200mbit"),
    ),
    # docs/measured.md
    "launcher run cluster=mysite cluster.nodes=8 run.steps=20000 run.checkpoint_every=500 --requeue": Ran(
        tests=("test_faults.py::test_requeued_run_resumes_from_its_checkpoints_to_the_uninterrupted_parameters",),
        args=("cluster.nodes", "run.checkpoint_every", "--requeue"),
    ),
    # docs/tuning.md
    "launcher sweep sweep.search=adaptive sweep.world_sizes='[1,2,3,4,6,8]'": Ran(
        tests=(
            "test_doc_commands.py::test_adaptive_search_over_the_sizes_shown",
            "test_tuner.py::test_adaptive_driver_doubles_refines_and_closes_the_rest",
        ),
        args=("sweep.search=adaptive", "[1,2,3,4,6,8]"),
    ),
    "launcher sweep cluster.usd_per_device_hour=2.5 cluster.spot_discount=0.6 sweep.token_budget=2e11": Ran(
        tests=("test_doc_commands.py::test_a_price_a_spot_discount_and_a_token_budget",),
        args=("cluster.usd_per_device_hour=2.5", "cluster.spot_discount=0.6", "sweep.token_budget=2e11"),
    ),
    "launcher sweep sweep.policy=fastest_within_budget sweep.token_budget=2e11 sweep.budget_device_hours=20000": Ran(
        tests=("test_doc_commands.py::test_the_fastest_size_within_a_budget",),
        args=("sweep.policy=fastest_within_budget", "sweep.token_budget=2e11", "sweep.budget_device_hours=20000"),
    ),
    "launcher analyze measured.csv --usd-per-gpu-hour 2.5": Ran(
        tests=("test_doc_commands.py::test_analyze_judges_a_table_measured_elsewhere_and_prices_it",),
        args=("measured.csv", "--usd-per-gpu-hour"),
    ),
    "launcher analyze TABLE": Ran(
        tests=("test_doc_commands.py::test_analyze_judges_a_table_measured_elsewhere_and_prices_it",)
    ),
    "launcher plan model=llama3_8b precision=bf16 model.activation_checkpointing=full parallel=fsdp "
    "batch.micro=1 cluster=example_gpu_site cluster.peak_flops_per_device=9.89e14 cluster.inter_link=ib400 "
    "cluster.nics_per_node=8 --gpus 8..1024 --output plan.csv": Ran(
        tests=("test_plan_output.py::test_the_acceptance_command_writes_every_size_with_the_columns",),
        args=(
            "model=llama3_8b",
            "model.activation_checkpointing=full",
            "batch.micro=1",
            "cluster.peak_flops_per_device=9.89e14",
            "cluster.inter_link=ib400",
            "cluster.nics_per_node=8",
            "8..1024",
            "--output",
        ),
    ),
    "launcher plan model=llama3_70b cluster=example_gpu_site parallel=hsdp parallel.shard=64 "
    "model.activation_checkpointing=full batch.micro=1": Ran(
        tests=("test_layouts_hsdp_cp.py::test_plan_of_hsdp_predicts_and_states_its_assumptions",),
        args=("model=llama3_70b", "cluster=example_gpu_site", "parallel=hsdp", "parallel.shard=64"),
    ),
    "launcher plan model=llama3_70b cluster=example_gpu_site parallel=fsdp_tp_cp parallel.cp=2 parallel.tp=8 "
    "model.activation_checkpointing=full batch.micro=1": Ran(
        tests=("test_layouts_hsdp_cp.py::test_plan_of_context_parallel_predicts_and_states_its_assumptions",),
        args=("model=llama3_70b", "parallel=fsdp_tp_cp", "parallel.cp=2", "parallel.tp=8"),
    ),
    "launcher plan model=llama3_405b cluster=example_gpu_site parallel=fsdp_tp_pp_cp parallel.tp=8 parallel.pp=14 "
    "parallel.cp=2 parallel.microbatches=14 model.activation_checkpointing=full batch.micro=14": Ran(
        tests=("test_layouts_hsdp_cp.py::test_plan_of_llama_405b_in_its_four_d_layout",),
        args=("model=llama3_405b", "parallel=fsdp_tp_pp_cp", "parallel.pp=14", "parallel.microbatches=14"),
    ),
    "launcher plan model=gpt_1_3b parallel=fsdp,fsdp_tp parallel.tp=2 cluster=example_gpu_site --gpus 8..1024": Ran(
        tests=("test_plan_search.py::test_comma_values_plan_each_combination_in_one_table",),
        args=("parallel=fsdp,fsdp_tp", "parallel.tp=2", "8..1024"),
    ),
    "launcher plan --search model=llama3_70b precision=bf16 batch.global_batch=1024 cluster=example_gpu_site "
    "cluster.device_name=H100-SXM cluster.peak_flops_per_device=null cluster.nics_per_node=8 --gpus 8..16384": Ran(
        tests=("test_plan_search.py::test_search_picks_a_fitting_candidate_per_size_and_writes_every_one",),
        args=("--search", "model=llama3_70b", "batch.global_batch=1024", "cluster.device_name=H100-SXM", "8..16384"),
    ),
    "launcher plan --search": Ran(
        tests=("test_plan_search.py::test_search_picks_a_fitting_candidate_per_size_and_writes_every_one",),
        args=("--search",),
    ),
    "launcher plan --search model=tiny_gpt cluster=devcluster cluster.peak_flops_per_device=5e10 batch.micro=2 "
    "--gpus 2 --verify 3": Ran(
        tests=(
            "test_plan_verify_slurm.py::test_verify_three_measures_them_and_the_measured_best_is_in_the_predicted_top_two",
        ),
        args=("--search", "--verify", "cluster=devcluster", "batch.micro=2"),
    ),
    "launcher sweep parallel=dp_pp parallel.pp=2 batch.global_batch=32 batch.micro=2 'sweep.world_sizes=[2,4]'": Ran(
        tests=("test_pipeline_global_batch.py::test_a_strong_scaling_pipeline_sweep_across_sizes_is_one_command",),
        args=("parallel=dp_pp", "batch.global_batch=32", "batch.micro=2", "sweep.world_sizes=[2,4]"),
    ),
    "launcher plan --search … --verify K": Ran(
        tests=("test_plan_verify.py::test_verify_two_locally_measures_both_and_recommends_the_measured_best",),
        args=("--search", "--verify"),
    ),
    "launcher plan … --output plan.csv": Ran(
        tests=("test_plan_output.py::test_the_acceptance_command_writes_every_size_with_the_columns",),
        args=("--output",),
    ),
    # docs/profile.md
    "launcher profile cluster=devcluster cluster.tasks_per_node=2 --nodes 2 --output site.json": Ran(
        tests=("test_profile_slurm.py::test_profile_on_two_nodes_of_the_dev_cluster",),
        args=("cluster=devcluster", "cluster.tasks_per_node=2", "--nodes", "--output"),
    ),
    "launcher plan cluster=devcluster cluster.profile=site.json --gpus 1,2,4": Ran(
        tests=("test_site_profile_local.py::test_profile_on_local_ranks",),
        args=("cluster=devcluster", "cluster.profile="),
    ),
    "launcher profile --ranks 2 --output local.json": Ran(
        tests=("test_site_profile_local.py::test_profile_on_local_ranks",), args=("--ranks", "--output")
    ),
    # docs/gpus.md, docs/architecture.md
    "python -m benchmarks.gpu_smoke": ShownOnly(
        reason="it needs a CUDA GPU, and without one it overwrites the recorded H100 run with 'NOT run: no GPU'"
    ),
    "launcher profile --ranks 1 cluster.device=cuda --output benchmarks/results/gpu_profile.json": ShownOnly(
        reason="it needs a CUDA GPU; test_gpu_smoke_profile.py runs gpu_smoke's same command on a CPU rank"
    ),
    "python -m benchmarks.mfu_width": Ran(
        tests=(
            "test_mfu_width_profile.py::test_the_report_scores_every_measured_row_from_the_profile_or_says_none_was_measured",
        ),
        args=(),
    ),
    "python -m benchmarks.<name>": ShownOnly(
        reason="a pattern for every benchmark; benchmarks are timed runs kept out of the tests by design"
    ),
}


@functools.cache
def _test_file(name: str) -> Path:
    found = sorted(TESTS.rglob(name))
    assert len(found) == 1, f"{name}: {len(found)} files of that name under tests/"
    return found[0]


def _top_level(path: Path) -> dict[str, str]:
    """Name → source of each top-level def, class and assignment of a file."""
    text = path.read_text()
    lines = text.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        source = "\n".join(lines[first - 1 : node.end_lineno])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = source
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = source
    return out


def _conftests(path: Path) -> list[Path]:
    folders = [p for p in path.parents if p == TESTS or TESTS in p.parents]
    return [f / "conftest.py" for f in folders if (f / "conftest.py").is_file()]


@functools.cache
def node_source(node_id: str) -> str:
    """The test's source with every module- or conftest-level name it uses, followed to the end."""
    file, *names = node_id.split("[")[0].split("::")
    path = _test_file(file)
    scope: dict[str, str] = {}
    for conftest in reversed(_conftests(path)):
        scope |= _top_level(conftest)
    scope |= _top_level(path)
    assert names and names[0] in scope, f"{node_id}: no {names[0] if names else 'test'} in {path.relative_to(REPO)}"
    source = scope[names[0]]
    if len(names) == 2:
        cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
        assert any(getattr(n, "name", None) == names[1] for n in cls.body), f"{node_id}: no {names[1]}"
    seen, todo, parts = {names[0]}, [source], [source]
    while todo:
        for n in ast.walk(ast.parse(todo.pop())):
            name = n.id if isinstance(n, ast.Name) else n.arg if isinstance(n, ast.arg) else None
            if name in scope and name not in seen:
                seen.add(name)
                todo.append(scope[name])
                parts.append(scope[name])
    return "\n".join(parts)


def _where(doc: str, line: int) -> str:
    return f"{doc}:{line}"


def test_every_command_shown_is_registered():
    unknown = [f"{_where(d, n)}: {c}" for d, n, c in shown_commands() if c not in REGISTRY]
    assert not unknown, "commands the docs show that no REGISTRY entry names (add the tests that run them):\n" + (
        "\n".join(unknown)
    )


def test_every_registered_command_is_still_shown():
    shown = {c for _, _, c in shown_commands()}
    assert sorted(set(REGISTRY) - shown) == []


def problems(command: str, entry: Ran) -> list[str]:
    """What is wrong with `entry` as the tests that run `command`; empty when nothing is."""
    out = [f"{a!r} is not in the command" for a in entry.args if a not in command]
    if not entry.tests:
        return [*out, "no test named"]
    # A parametrized id's bracket (`test_x[sweep]`) names what that node runs, so it counts as its text.
    sources = {t: node_source(t) + " " + t.partition("[")[2].rstrip("]") for t in entry.tests}
    said = re.compile(rf"(?<![\w.-]){re.escape(verb(command))}(?![\w.-])")
    out += [f"{t} does not run `{verb(command)}`" for t, s in sources.items() if not said.search(s)]
    out += [f"no test named runs {a!r}" for a in entry.args if not any(a in s for s in sources.values())]
    return out


@pytest.mark.parametrize("command", sorted(c for c, e in REGISTRY.items() if isinstance(e, Ran)))
def test_the_tests_named_run_the_command(command):
    assert problems(command, REGISTRY[command]) == []


def test_a_test_that_does_not_run_the_command_is_caught():
    plan = "launcher plan --gpus 8..64 --output plan.csv"
    assert problems(plan, Ran(tests=("test_cli.py::test_no_verb_is_one_usage_error",), args=("--output", "8..9"))) == [
        "'8..9' is not in the command",
        "test_cli.py::test_no_verb_is_one_usage_error does not run `plan`",
        "no test named runs '--output'",
        "no test named runs '8..9'",
    ]
    with pytest.raises(AssertionError, match="no test_gone in"):
        problems(plan, Ran(tests=("test_cli.py::test_gone",)))


def test_shown_only_says_why():
    assert all(len(e.reason.split()) >= 4 for e in REGISTRY.values() if isinstance(e, ShownOnly))


def test_extracting_commands():
    text = (
        "Run `launcher sweep`, `launcher plan --gpus 8` or\n`launcher cluster up`; `x=1`.\n\n"
        "```bash\nlauncher sweep a=1 \\\n  b=2   # why\n# a comment\nPYTHONPATH=x launcher run\n```\n"
    )
    assert _bash_commands(text) == [(5, "launcher sweep a=1 b=2"), (8, "PYTHONPATH=x launcher run")]
    assert _inline_commands(text) == [(1, "launcher plan --gpus 8"), (2, "launcher cluster up")]
    assert [verb(c) for c in ("PYTHONPATH=x launcher run a", "python -m benchmarks.gpu_smoke", "launcher --info")] == [
        "run",
        "gpu_smoke",
        "--info",
    ]
    assert verb("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python -m pytest") == "pytest"


# --- the pages themselves ----------------------------------------------------------------------


def test_readme_stays_short():
    assert len((REPO / "README.md").read_text()) <= 12_000


def _links(doc: Path) -> list[tuple[int, str]]:
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group().count("\n"), doc.read_text(), flags=re.S)
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"\]\(([^)\s]+)\)", text)]


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(REPO / t.split("#")[0]).resolve() for _, t in _links(REPO / "README.md")}
    assert [p.name for p in DOCS[1:] if p.resolve() not in linked] == []


def test_every_relative_link_resolves():
    broken = [
        f"{_where(str(d.relative_to(REPO)), n)}: {t}"
        for d in DOCS
        for n, t in _links(d)
        if not re.match(r"[a-z]+:", t) and not (d.parent / t.split("#")[0]).exists()
    ]
    assert not broken, "\n".join(broken)


def test_every_verb_the_docs_name_exists():
    known = {*cli.VERBS, "--info", "--help", "--version"}
    calls = [p for _, _, c in shown_commands() for p in c.split(" && ")]
    launcher = [p for p in calls if re.match(r"(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?launcher\s", p)]
    assert launcher and [p for p in launcher if verb(p) not in known] == []


# --- the framework callbacks (launcher/integrations): shown where users look -------------------------------

INTEGRATIONS = REPO / "launcher" / "integrations"


def _callback_keywords(module: str) -> set[str]:
    """The keyword arguments of `MeterCallback.__init__` in launcher/integrations/<module>.py, read from its source
    (importing it would import the framework)."""
    tree = ast.parse((INTEGRATIONS / f"{module}.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MeterCallback")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {a.arg for a in init.args.args[1:] + init.args.kwonlyargs}


def _callback_modules() -> list[str]:
    return sorted(p.stem for p in INTEGRATIONS.glob("*.py") if "class MeterCallback" in p.read_text())


def test_own_command_shows_each_callbacks_two_lines_as_the_module_spells_them():
    """Issue 31 item 7: docs/own-command.md shows, per framework, the import and the line that adds the callback,
    in python blocks, with MeterCallback's own keyword (tokens_per_sample). Fails if a framework's callback is not
    shown, or if a shown line imports a module or passes an argument the callback does not have."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "own-command.md").read_text(), flags=re.S)
    shown: dict[str, set[str]] = {}
    for block in (b for b in blocks if "MeterCallback" in b):
        tree = ast.parse(block)
        (imported,) = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
        assert imported.module.startswith("launcher.integrations.") and [a.name for a in imported.names] == [
            "MeterCallback"
        ]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "MeterCallback"]
        assert len(calls) == 1 and not calls[0].args, block
        shown[imported.module.rsplit(".", 1)[1]] = {k.arg for k in calls[0].keywords}
    assert sorted(shown) == _callback_modules() == ["hf", "lightning"]
    assert all(keywords == {"tokens_per_sample"} <= _callback_keywords(m) for m, keywords in shown.items())


def test_readme_names_each_callback_and_the_extra_that_brings_its_framework():
    """Issue 31 item 7: README's "Bring your training" names MeterCallback(tokens_per_sample=…), each integration
    module and each extra pyproject.toml declares for them (`hf`, `lightning`). Fails if one is left out there, or
    if an extra is renamed in pyproject.toml and not in the README."""
    import tomllib

    readme = (REPO / "README.md").read_text()
    part = readme.split("## Bring your training", 1)[1].split("\n## ", 1)[0]
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert "`MeterCallback(tokens_per_sample=…)`" in part
    for module in _callback_modules():
        assert f"`launcher.integrations.{module}`" in part, module
        assert module in extras and f"`{module}`" in part and "extra" in part, module
