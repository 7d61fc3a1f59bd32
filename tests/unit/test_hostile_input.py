"""Hostile input: every string that can reach a rendered sbatch script either is refused with one
line (exit 2, nothing created, nothing submitted) or lands in the script as inert data — shell-quoted
where bash reads it, passed back verbatim by bash, and accepted by the real `sbatch --test-only`.

Hydra composition costs ~0.25 s a call, so the big matrix (hostile value × field) injects each exact
value into the composed config (`injected`: the real composition of the base overrides is cached and
the value set afterwards; argv could not carry a NUL anyway). Everything after composition — loading,
validation, planning, rendering, the CLI's exit status and stderr — is the real code. The `hydra_*`
tests send the same hostile values through real quoted overrides, to prove the quoting round-trips.

A canary file path is embedded in every hostile value; rendered scripts run under bash with stub
`srun`/`scontrol`/`sbatch` first on PATH (the stub srun stands in for the training step, not for the
scheduler: the scheduler's check is the real `sbatch --test-only`, batched per module,
in tests/slurm/test_hostile_input_slurm.py).
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.config import compose as compose_mod

DEV = ["cluster=devcluster"]


NO_SLURM = ["cluster.slurm_conf=/nonexistent/slurm.conf"]  # any sbatch that slipped through fails loudly


SWEEP_NAME = "hostile"


TRIAL_ID = "000-ws1"


# --- hostile values ----------------------------------------------------------------------------
# `{c}` is the canary file path; nothing may ever create it.
HOSTILE = {
    "semicolon": "x;touch {c}",
    "pipe": "x|touch {c}",
    "ampersand": "x&&touch {c}&",
    "redirect_out": "x>{c}",
    "redirect_in": "x<{c}",
    "newline": "x\ntouch {c}",
    "carriage_return": "x\rtouch {c}",
    "crlf": "x\r\ntouch {c}",
    "command_subst": "$(touch {c})",
    "backticks": "`touch {c}`",
    "single_quotes": "it's'$(touch {c})'",
    "double_quotes": 'say "$(touch {c})"',
    "ifs": "x${{IFS}}touch${{IFS}}{c}",
    "glob": "*",
    "leading_dash": "-c",
    "umlaut": "ümlaut",
    "rtl_override": "x\u202e{c}",
    "emoji": "🚀🔥",
    "line_separator": "x\u2028touch {c}",
    "backslash": "x\\;touch {c}\\",
    "nul": "x\x00touch {c}",
    "long_10k": "x" * 10_000,
}


def hostile(name: str, canary: Path) -> str:
    return HOSTILE[name].format(c=canary)


# The one expansion a cluster.env value gets: `${NAME}`, when the job runs (bash's IFS, unset → empty).
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


JOB_VARIABLES = {"IFS": " \t\n"}


def env_rendered(value: str) -> str:
    """The env value as bash's word splitting leaves it before expansion: `${NAME}` → `${NAME-}`."""
    return ENV_REFERENCE.sub(r"${\1-}", value)


def env_expanded(value: str) -> str:
    """What the job's variable holds: each `${NAME}` expanded, every other character as written."""
    return ENV_REFERENCE.sub(lambda m: JOB_VARIABLES.get(m.group(1), ""), value)


# Fields whose values reach the script, and the hostile values each accepts as inert data; every
# other hostile value must be refused. Names and #SBATCH values accept none: #SBATCH lines are
# tokenised by sbatch without a shell, so only Slurm's own characters may appear there.
ALL = set(HOSTILE)


ACCEPTS: dict[str, set[str]] = {
    "sweep.name": set(),
    "model.name": set(),
    "cluster.name": set(),
    "cluster.partition": set(),
    "cluster.account": set(),
    "cluster.qos": set(),
    "cluster.constraint": set(),
    "cluster.time_limit": set(),
    "cluster.mem": set(),
    "cluster.sbatch_extra": set(),
    "cluster.env:name": set(),
    # Body values: shell-quoted. A path is one argv word: no newline, no NUL, no leading '-' (srun
    # would read it as an option).
    "cluster.python": ALL - {"newline", "crlf", "nul", "leading_dash"},
    "cluster.python@torchrun": {"semicolon", "command_subst", "backticks", "single_quotes", "double_quotes", "ifs"},
    # sbatch refuses a script with a CR-LF pair; NUL and > 4096 characters are refused too. A
    # `${NAME}` in a value (`ifs`) expands when the job runs; nothing else in it is interpreted.
    "cluster.env:value": ALL - {"nul", "long_10k", "crlf"},
    # pyxis/enroot's srun options, one shell-quoted word each: no control characters (no image or
    # path has them), and no mount may hold ',' (pyxis's mount separator) or ':' (src:dst[:flags]).
    "cluster.container_image": ALL - {"newline", "carriage_return", "crlf", "nul"},
    "cluster.container_mounts:src": ALL - {"newline", "carriage_return", "crlf", "nul"},
    # The sweep folder is on the #SBATCH --output line: a folder named `-c` is fine, nothing else is.
    "sweep.results_dir": {"leading_dash"},
    # Not in the script at all (trial.json carries it): any file that exists is fine.
    "data.path": ALL - {"nul", "long_10k"},
    # job=command: each argv word and env value is one shell-quoted word of the script (trial_words); no NUL
    # (no argv holds one), no CR-LF (sbatch refuses it), and `${NAME}` is an interpolation key the launcher
    # resolves per trial, so an unknown one (`ifs`: ${IFS}) is refused. Env names are variable names only.
    "job.argv": ALL - {"nul", "crlf", "ifs"},
    "job.env:value": ALL - {"nul", "crlf", "ifs"},
    "job.env:name": set(),
}


FIELD_NAMED = {
    "cluster.env:name": "cluster.env",
    "cluster.env:value": "cluster.env",
    "cluster.python@torchrun": "cluster.python",
    "cluster.container_mounts:src": "cluster.container_mounts",
    "job.env:value": "job.env",
    "job.env:name": "job.env",
}


def inject(field: str, value, case_dir: Path) -> tuple[dict, object]:
    """(config values to set, the value as the script should carry it) for `value` in `field`."""
    if field == "cluster.env:name":
        return {"cluster.env": [f"{value}=1"]}, value
    if field == "cluster.env:value":
        return {"cluster.env": [f"HOSTILE={value}"]}, value
    if field == "cluster.sbatch_extra":
        return {"cluster.sbatch_extra": [value]}, value
    if field.startswith("cluster.container_mounts"):  # `:src`: the hostile value in a mount's source path
        mount = f"/src/{value}:/dst" if field.endswith(":src") else value
        return {"cluster.container_image": "img.sqsh", "cluster.container_mounts": [mount]}, mount
    if field == "cluster.python@torchrun":
        return {"cluster.python": value, "cluster.launch": "torchrun"}, value
    if field == "cluster.setup":
        return {"cluster.setup": list(value)}, value
    if field.startswith("job."):  # the user's own command, one hostile word in its argv or env
        job = {"job.kind": "command", "job.argv": [sys.executable, "-c", "pass"]}
        if field == "job.argv":
            return {**job, "job.argv": [sys.executable, "-c", value]}, value
        return {**job, "job.env": {"HOSTILE": value} if field.endswith(":value") else {value: "1"}}, value
    if field == "sweep.results_dir":
        path = f"{case_dir}/{value}"
        return {"sweep.results_dir": path}, path
    if field == "data.path":
        path = f"{case_dir}/data/{value}"
        return {"data.kind": "file", "data.path": path}, path
    return {field: value}, value


_REAL_COMPOSE = compose_mod.compose_dict


_COMPOSED: dict[tuple, dict] = {}


def _composed(overrides, recipes) -> dict:
    key = (tuple(overrides), str(recipes))
    if key not in _COMPOSED:
        _COMPOSED[key] = _REAL_COMPOSE(overrides, recipes)
    return copy.deepcopy(_COMPOSED[key])


@contextlib.contextmanager
def guarded(values: dict | None = None):
    """No scheduler command and no local rank may run inside; with `values`, compose the overrides
    for real (cached) and then set these exact config values (dotted keys)."""
    launched: list = []

    def refuse(*args, **kwargs):
        launched.append(args)
        raise AssertionError(f"something was launched: {args!r:.300}")

    def compose_dict(overrides, recipes=None):
        data = _composed(overrides, recipes)
        for key, value in (values or {}).items():
            *parents, leaf = key.split(".")
            node = data
            for p in parents:
                node = node[p]
            node[leaf] = value
        return data

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("launcher.slurm.commands._run", refuse)
        mp.setattr("launcher.run.executor.local.run_trial_dir", refuse)
        mp.setattr("launcher.run.local.run_local", refuse)
        if values is not None:  # Hydra's road, whose document the values are set on (the cache's road skipped)
            mp.setattr(compose_mod, "compose_dict", compose_dict)
            mp.setattr(compose_mod, "_from_cache", lambda overrides, folders: None)
        yield launched


def cli(argv: list[str], values: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with guarded(values) as launched, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert launched == []
    return rc, out.getvalue(), err.getvalue()


def argv_for(command: str, results: Path | None, base: list[str] = DEV) -> list[str]:
    tail = [f"sweep.results_dir={results}"] if results is not None else []
    if command == "sweep":
        return ["sweep", *base, *NO_SLURM, *tail]
    return ["run", *base, *tail, "--dry-run"]


def assert_refused(rc: int, out: str, err: str, field: str, where: Path) -> None:
    """Exit 2, exactly one stderr line naming the field, nothing on stdout, nothing created."""
    assert rc == 2, (rc, err[-500:])
    assert err.startswith("launcher: error: ") and err.endswith("\n"), err[:500]
    assert len(err.splitlines()) == 1 and err.count("\n") == 1, f"more than one line: {err[:500]!r}"
    assert "Traceback" not in err
    assert field in err, f"message does not name {field}: {err[:300]!r}"
    assert out == ""
    assert list(where.iterdir()) == [], sorted(p.name for p in where.iterdir())


# Every refusal goes through `sweep` (which would submit). `run --dry-run` writes the sweep folder
# before it renders, so it runs the fields that name folders in full and a sample of the rest.
FOLDER_FIELDS = {"sweep.results_dir", "sweep.name", "model.name"}


DRY_RUN_SAMPLE = {"newline", "command_subst", "nul", "long_10k", "leading_dash"}


REFUSED = [
    (field, name, command)
    for field, ok in ACCEPTS.items()
    if not field.endswith("@torchrun")
    for name in HOSTILE
    if name not in ok
    for command in ("sweep", "dry-run")
    if command == "sweep" or field in FOLDER_FIELDS or name in DRY_RUN_SAMPLE
]


# Further values each field must refuse: the trailing newline a `$`-anchored regex lets through,
# digits of other scripts (`\d`), unbounded numbers, CR-LF, reserved names, absurd sizes.
EXTRA_REFUSED: list[tuple[str, str, object]] = [
    ("sweep.name", "trailing_newline", "x\n"),
    ("model.name", "trailing_newline", "tiny_gpt\n"),
    ("cluster.name", "trailing_newline", "devcluster\n"),
    ("cluster.partition", "trailing_newline", "debug\n"),
    ("cluster.partition", "option_like", "--exclusive"),
    ("cluster.account", "trailing_newline", "dev\n"),
    ("cluster.qos", "option_like", "-normal"),
    ("cluster.constraint", "trailing_newline", "dev\n"),
    ("cluster.constraint", "leading_not", "!dev"),
    ("cluster.time_limit", "trailing_newline", "00:10:00\n"),
    ("cluster.time_limit", "arabic_indic_digits", "٠٠:١٠:٠٠"),
    ("cluster.time_limit", "fullwidth_digits", "００:１０"),
    ("cluster.time_limit", "10k_digits", "9" * 10_000),
    ("cluster.mem", "trailing_newline", "1G\n"),
    ("cluster.mem", "arabic_indic_digits", "١G"),
    ("cluster.mem", "30_digits", "9" * 30),
    ("cluster.sbatch_extra", "trailing_newline", "--comment=x\n"),
    ("cluster.sbatch_extra", "space", "--comment=a b"),
    ("cluster.sbatch_extra", "short_option", "-N 1000"),
    ("cluster.env:name", "trailing_newline", "FOO\n"),
    ("cluster.env:name", "reserved_master_port", "MASTER_PORT"),
    ("cluster.env:name", "reserved_slurm", "SLURM_JOB_ID"),
    ("cluster.env:name", "reserved_rank", "RANK"),
    ("cluster.env:name", "starts_with_digit", "1X"),
    ("cluster.env:value", "crlf_only", "\r\n"),
    ("cluster.env:value", "4097_chars", "v" * 4097),
    ("cluster.container_image", "blank", "  "),
    ("cluster.container_image", "tab", "img\tx"),
    ("cluster.container_mounts", "comma", "/a,b:/c"),
    ("cluster.container_mounts", "no_dst", "/data"),
    ("cluster.container_mounts", "four_parts", "/a:/b:ro:x"),
    ("cluster.container_mounts", "relative_dst", "/a:data"),
    ("cluster.container_mounts", "flags_with_shell", "/a:/b:ro;id"),
    ("cluster.python", "blank", "   "),
    ("cluster.python", "empty", ""),
    ("cluster.python", "option", "--version"),
    ("cluster.setup", "nul", ["echo a\x00b"]),
    ("cluster.setup", "trailing_cr", ["module load cuda\r"]),
    ("cluster.setup", "crlf_inside", ["echo a\r\necho b"]),
    ("sweep.results_dir", "percent_pattern", "100%j"),
    ("sweep.results_dir", "space", "my results"),
    ("sweep.results_dir", "folder_name_over_255", "r" * 256),
    ("data.path", "missing", "nope.bin"),
    ("sweep.world_sizes", "over_2^20", [1 << 21]),
    ("sweep.nodes", "over_2^20", [1, (1 << 20) + 1]),
    ("cluster.nodes", "over_2^20", (1 << 20) + 1),
    ("sweep.repeats", "1001", 1001),
    ("cluster.signal_warning_s", "65536", 65536),
]


@pytest.mark.parametrize("field, name, command", REFUSED, ids=[f"{f}-{n}-{c}" for f, n, c in REFUSED])
def test_hostile_value_is_refused(field, name, command, tmp_path):
    canary = tmp_path.parent / f"CANARY-{tmp_path.name}"
    values, _ = inject(field, hostile(name, canary), tmp_path)
    results = tmp_path / "results"
    values.setdefault("sweep.results_dir", str(results))
    rc, out, err = cli(argv_for(command, None), values)
    assert_refused(rc, out, err, FIELD_NAMED.get(field, field), tmp_path)
    assert not canary.exists()


EXTRA_RUNS = [
    (*case, command)
    for case in EXTRA_REFUSED
    for command in ("sweep", "dry-run")
    if command == "sweep" or case[0] in FOLDER_FIELDS
]


@pytest.mark.parametrize("field, name, value, command", EXTRA_RUNS, ids=[f"{f}-{n}-{c}" for f, n, _, c in EXTRA_RUNS])
def test_edge_value_is_refused(field, name, value, command, tmp_path):
    values, _ = inject(field, value, tmp_path)
    values.setdefault("sweep.results_dir", str(tmp_path / "results"))
    rc, out, err = cli(argv_for(command, None), values)
    assert_refused(rc, out, err, FIELD_NAMED.get(field, field), tmp_path)


# Local ranks are processes on this machine: an absurd size must be refused, never started
# (`guarded` turns any started trial into a failure).
@pytest.mark.parametrize(
    "argv, field",
    [
        (["sweep", "sweep.world_sizes=[100000000]"], "sweep.world_sizes"),
        (["sweep", "sweep.world_sizes=[1,257]"], "sweep.world_sizes"),
        (["run", "run.world_size=100000000", "--dry-run"], "run.world_size"),
        (["run", "run.world_size=300"], "run.world_size"),
    ],
    ids=["sweep-1e8", "sweep-257", "run-dry-1e8", "run-300"],
)
def test_absurd_local_sizes_are_refused_before_anything_starts(argv, field, tmp_path):
    rc, out, err = cli([argv[0], f"sweep.results_dir={tmp_path / 'results'}", *argv[1:]])
    assert_refused(rc, out, err, field, tmp_path)


# Real Hydra: overrides as a user types them. Absurd sizes, bad types, unparsable shell text.
HYDRA_REFUSED = [
    ("sweep", ["sweep.world_sizes=[100000000]"], "sweep.world_sizes"),
    ("sweep", ["sweep.nodes=[100000000]"], "sweep.nodes"),
    ("dry-run", ["cluster.nodes=100000000"], "cluster.nodes"),
    ("sweep", ["sweep.repeats=100000000"], "sweep.repeats"),
    ("dry-run", ["cluster.signal_warning_s=100000000000000000000"], "cluster.signal_warning_s"),
    ("sweep", ["cluster.nodes=1e8"], "cluster.nodes"),
    ("sweep", ["cluster.nodes=true"], "cluster.nodes"),
    ("sweep", ["sweep.nodes=[1,2.5]"], "sweep.nodes"),
    ("sweep", ["cluster.time_limit=null"], "cluster.time_limit"),
    ("sweep", ["cluster.python=[a]"], "cluster.python"),
    ("sweep", ["cluster.sbatch_extra=[[--x]]"], "cluster.sbatch_extra"),
    ("sweep", ["cluster.setup={{a:1}}"], "cluster.setup"),
    ("sweep", ["cluster.env=[1]"], "cluster.env"),
    ("sweep", ["optim.lr=nan"], "optim.lr"),
    ("sweep", ["sweep.threshold=nan"], "sweep.threshold"),
    ("sweep", ["cluster.pg_timeout_s=inf"], "cluster.pg_timeout_s"),
    ("sweep", ["cluster.python=$(touch {c})"], "cluster.python"),
    ("sweep", ["cluster.env=[X=$(touch {c})]"], "cluster.env"),
    ("dry-run", ["cluster.partition=debug;touch {c}"], "cluster.partition"),
    ("dry-run", ["sweep.name='x;touch {c}'"], "sweep.name"),
    ("dry-run", ["cluster.time_limit='00:10:00\n'"], "cluster.time_limit"),
    ("dry-run", ["cluster.env=['FOO\n=1']"], "cluster.env"),
    ("dry-run", ["sweep.results_dir={tmp}/100%j"], "sweep.results_dir"),
    ("dry-run", ["sweep.results_dir='{tmp}/my results'"], "sweep.results_dir"),
    ("sweep", ["data=file", "data.path={tmp}/" + "x" * 10_000], "data.path"),
]


@pytest.mark.parametrize(
    "command, overrides, field",
    HYDRA_REFUSED,
    ids=[f"{c}-{' '.join(o)[:60]}".replace("{{", "{").replace("}}", "}") for c, o, _ in HYDRA_REFUSED],
)
def test_hydra_override_is_refused(command, overrides, field, tmp_path):
    canary = tmp_path.parent / f"CANARY-{tmp_path.name}"
    overrides = [o.format(c=canary, tmp=tmp_path) for o in overrides]
    own_dir = any(o.startswith("sweep.results_dir=") for o in overrides)
    argv = argv_for(command, None if own_dir else tmp_path / "results")
    argv = [*argv[:-1], *overrides, argv[-1]] if command == "dry-run" else [*argv, *overrides]
    rc, out, err = cli(argv)
    assert_refused(rc, out, err, field, tmp_path)
    assert not canary.exists()


@dataclass
class Case:
    id: str
    field: str
    value: object  # as given
    used: object  # as the script should carry it
    dir: Path
    rc: int = -1
    out: str = ""
    err: str = ""

    @property
    def canary(self) -> Path:
        return self.dir / "CANARY"

    @property
    def results(self) -> Path:
        return Path(self.used) if self.field == "sweep.results_dir" else self.dir / "results"

    @property
    def trial_dir(self) -> Path:
        return self.results.resolve() / SWEEP_NAME / "trials" / TRIAL_ID

    @property
    def script_path(self) -> Path:
        return self.results / SWEEP_NAME / "jobs" / "job-000.sbatch"


SETUP_LINES = [
    'mark() { printf "%s" "$1" > "$STUB_LOG/function-ran"; }',
    "export CANARY_OK=$(echo yes)",
    'mark "function ran with $CANARY_OK"',
    'source "$HOME/fake-conda.sh"',  # reads an unset variable, as conda's activate scripts do
    'echo "${SETUP_UNSET_VARIABLE}" > /dev/null',
]


FAKE_CONDA = ': "${CONDA_SHLVL_NEVER_SET_ABC}"\n__conda_fn() { :; }\nexport CONDA_FAKE=activated\n'


ACCEPTED_SPECIALS: list[tuple[str, str, object]] = [
    ("cluster.constraint", "or", "dev|cpu"),
    ("cluster.constraint", "and", "dev&cpu"),
    ("cluster.constraint", "brackets", "[dev|cpu]"),
    ("cluster.sbatch_extra", "glob", "--comment=*"),
    ("cluster.sbatch_extra", "punctuation", "--comment=a,b=c@d+e:f"),
    ("sweep.results_dir", "punctuation", "a=b,c@d+e"),
    ("batch.micro", "10^12", 10**12),
    ("cluster.setup", "shell_code", SETUP_LINES),
]


ACCEPTED_IDS = [f"{f}-{n}" for f, ok in ACCEPTS.items() for n in HOSTILE if n in ok]


ACCEPTED_IDS += [f"{f}-{n}" for f, n, _ in ACCEPTED_SPECIALS]


MARKERS = {
    "LAUNCHER_HOSTILE_MARKER": f"marker-{uuid.uuid4().hex}",
    "WANDB_API_KEY": f"wandb-{uuid.uuid4().hex}",
    "AWS_SECRET_ACCESS_KEY": f"aws-{uuid.uuid4().hex}",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Case]:
    """Every accepted case rendered by `launcher run cluster=devcluster ... --dry-run`, with the
    submitting shell holding secret-looking variables (none may reach a script)."""
    base = tmp_path_factory.mktemp("accepted")
    specs = [(f, n, None) for f, ok in ACCEPTS.items() for n in HOSTILE if n in ok] + ACCEPTED_SPECIALS
    cases = {}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in MARKERS.items():
            mp.setenv(key, value)
        for i, (field, name, special) in enumerate(specs):
            d = base / f"c{i:03d}"
            d.mkdir()
            value = special if special is not None else hostile(name, d / "CANARY")
            values, used = inject(field, value, d)
            case = Case(id=f"{field}-{name}", field=field, value=value, used=used, dir=d)
            if field == "data.path":
                Path(used).parent.mkdir(parents=True, exist_ok=True)
                Path(used).write_bytes(bytes(4096))
            if field == "cluster.setup":
                (d / "fake-conda.sh").write_text(FAKE_CONDA)
            values.setdefault("sweep.results_dir", str(case.results))
            values["sweep.name"] = SWEEP_NAME
            case.rc, case.out, case.err = cli(argv_for("dry-run", None), values)
            cases[case.id] = case
    return cases


def shell_words(script: str) -> list[str]:
    """The script's words as bash would split them (comments and #SBATCH lines dropped)."""
    return [w for w in shlex.split(script, comments=True) if w != "\n"]


def srun_python(words: list[str]) -> str:
    """The interpreter word: the one before the first `-m`."""
    return words[words.index("-m") - 1]


@pytest.mark.parametrize("case_id", ACCEPTED_IDS)
def test_accepted_value_is_inert_quoted_data(case_id, rendered):
    case = rendered[case_id]
    assert case.rc == 0, case.err[-500:]
    script = case.script_path.read_bytes().decode()  # keep \r as written
    assert case.out == script and script.startswith("#!/bin/bash\n")
    for marker in MARKERS.values():  # the submitting shell's environment never lands in a script
        assert marker not in script
    assert subprocess.run(["bash", "-n", str(case.script_path)], capture_output=True, check=False).returncode == 0
    words = shell_words(script)
    used, field = case.used, case.field
    if field.startswith("cluster.python"):
        assert srun_python(words) == used
    elif field == "cluster.container_image":
        assert f"--container-image={used}" in words
    elif field == "cluster.container_mounts:src":
        (word,) = {w for w in words if w.startswith("--container-mounts=")}
        assert word.removeprefix("--container-mounts=").split(",")[-1] == used
    elif field == "cluster.env:value":
        assert f"HOSTILE={env_rendered(used)}" in words
        if not ENV_REFERENCE.search(used):
            assert f"export HOSTILE={shlex.quote(used)}\n" in script
    elif field == "sweep.results_dir":
        assert str(case.trial_dir) in words
        assert f"#SBATCH --output={case.results.resolve()}/{SWEEP_NAME}/jobs/slurm-%j.out\n" in script
    elif field in ("data.path", "batch.micro"):
        assert str(used) not in script
    elif field == "cluster.constraint":
        assert f"#SBATCH --constraint={used}\n" in script and used not in words
    elif field == "cluster.sbatch_extra":
        assert f"#SBATCH {used}\n" in script and used not in words
    elif field == "cluster.setup":  # the user's own code: verbatim, before strict mode
        block = "".join(line + "\n" for line in used)
        assert block in script and script.index(block) < script.index("set -euo pipefail\n")
    elif field == "job.argv":
        assert used in words
    elif field == "job.env:value":
        assert f"HOSTILE={used}" in words
    else:
        raise AssertionError(f"no check for {field}")
    if isinstance(used, str) and len(used) > 3 and field not in ("cluster.constraint", "cluster.sbatch_extra"):
        # Outside its quoted form the raw value appears nowhere (bash never sees it unquoted).
        text = f"HOSTILE={used}" if field == "job.env:value" else used
        if field == "cluster.container_mounts:src":  # quoted as a whole with the launcher's own mounts
            text = next(w for w in words if w.startswith("--container-mounts=")).removeprefix("--container-mounts=")
        assert used not in script.replace(shlex.quote(text), "")


STUBS = {
    "srun": 'd=$(mktemp -d "$STUB_LOG/srun.XXXXXX")\nprintf "%s\\0" "$@" > "$d/argv"\nenv -0 > "$d/env"\n',
    "scontrol": 'printf "%s\\0" "$@" >> "$STUB_LOG/scontrol.argv"\n'
    'if [ "$1" = show ] && [ "$2" = hostnames ]; then echo n1; fi\n',
    "sbatch": 'printf "%s\\0" "$@" >> "$STUB_LOG/sbatch.argv"\n',
}


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("stubs")
    for name, body in STUBS.items():
        (d / name).write_text("#!/bin/bash\n" + body)
        (d / name).chmod(0o755)
    return d


@dataclass
class Ran:
    proc: subprocess.CompletedProcess
    srun: list[tuple[list[str], dict[str, str]]]  # (argv, environment) per srun call
    log: Path


def run_script(script: Path, stubs: Path, home: Path) -> Ran:
    log = home / "stub-log"
    log.mkdir(exist_ok=True)
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "HOME": str(home),
        "STUB_LOG": str(log),
        "LANG": "C.UTF-8",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_ARRAY_TASK_ID": "0",
    }
    proc = subprocess.run(
        ["bash", str(script)], env=env, cwd=home, capture_output=True, text=True, timeout=30, check=False
    )
    calls = []
    for d in sorted(log.glob("srun.*")):
        argv = (d / "argv").read_bytes().decode().split("\0")[:-1]
        pairs = (d / "env").read_bytes().decode().split("\0")[:-1]
        calls.append((argv, dict(p.split("=", 1) for p in pairs)))
    return Ran(proc=proc, srun=calls, log=log)


@pytest.mark.parametrize("case_id", ACCEPTED_IDS)
def test_accepted_value_runs_as_data_under_bash(case_id, rendered, stubs):
    case = rendered[case_id]
    assert case.rc == 0, case.err[-500:]
    ran = run_script(case.script_path, stubs, case.dir)
    assert ran.proc.returncode == 0, ran.proc.stderr[-1000:]
    assert not case.canary.exists(), "a hostile value ran as shell code"
    steps = [(argv, env) for argv, env in ran.srun if "launcher.train.link_probe" not in argv]
    # A command trial's link probe is a step of its own (at one rank too: it records the device).
    assert len(ran.srun) - len(steps) == (1 if case.field.startswith("job.") else 0)
    assert len(steps) == 1
    argv, env = steps[0]
    if case.field == "job.argv":  # srun gets the user's word back as one word, verbatim, last
        assert argv[-3:] == [sys.executable, "-c", case.used]
    elif case.field == "job.env:value":  # `env NAME=value` before the command: one word
        assert f"HOSTILE={case.used}" in argv
    else:
        assert argv[argv.index("--trial") + 1] == f"{case.trial_dir}/trial.json"
    # No cluster.python: the submitting interpreter, after setup lines the `python` on PATH, in an image `python3`.
    default = "python" if case.field == "cluster.setup" else sys.executable
    default = "python3" if case.field.startswith("cluster.container") else default
    assert srun_python(argv) == (case.used if case.field.startswith("cluster.python") else default)
    if case.field == "cluster.container_image":  # srun gets the value back as one word, verbatim
        assert f"--container-image={case.used}" in argv
    if case.field.startswith("cluster.container_mounts"):  # one mount of the one option word, after the launcher's
        (word,) = [w for w in argv if w.startswith("--container-mounts=")]
        assert word.removeprefix("--container-mounts=").split(",")[-1] == case.used
    if case.field == "cluster.env:value":
        assert env["HOSTILE"] == env_expanded(case.used)
    if case.field == "cluster.setup":  # setup lines are shell code and really run
        assert (ran.log / "function-ran").read_text() == "function ran with yes"
        assert env["CANARY_OK"] == "yes" and env["CONDA_FAKE"] == "activated"
    assert (case.trial_dir / "exit_code.attempt0").read_text() == "0\n"
    assert (ran.log / "scontrol.argv").read_bytes() == b"show\0hostnames\0n1\0"


@pytest.fixture(scope="module")
def test_only(rendered, devcluster) -> dict[str, tuple[bool, str]]:
    """`sbatch --test-only` on every accepted script, in parallel (one batch per module)."""
    from launcher.slurm.commands import sbatch_test_only

    env = devcluster.env()
    ok = [c for c in rendered.values() if c.rc == 0]
    with ThreadPoolExecutor(max_workers=8) as pool:
        said = pool.map(lambda c: sbatch_test_only(c.script_path, env), ok)
        return {c.id: s for c, s in zip(ok, said)}


def hydra_quote(value: str) -> str:
    """A Hydra override value that parses back to exactly `value`: single-quoted; quotes, the
    backslashes before a quote or at the end, and `${` (interpolation) escaped."""
    value = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
    return "'" + value.replace("'", "\\'").replace("${", "\\${") + "'"


CLI_HOSTILE = [n for n in HOSTILE if n != "nul"]  # argv cannot carry NUL (see test_yaml_nul_*)


@pytest.mark.parametrize("name", CLI_HOSTILE)
def test_hydra_quoted_python_round_trips_or_is_refused(name, tmp_path, stubs):
    canary = tmp_path / "CANARY"
    value = hostile(name, canary)
    results = tmp_path / "results"
    rc, out, err = cli(
        [
            "run",
            *DEV,
            f"cluster.python={hydra_quote(value)}",
            f"sweep.results_dir={results}",
            f"sweep.name={SWEEP_NAME}",
            "--dry-run",
        ]
    )
    if name not in ACCEPTS["cluster.python"]:
        assert_refused(rc, out, err, "cluster.python", tmp_path)
        return
    assert rc == 0, err
    assert srun_python(shell_words(out)) == value
    ran = run_script(results / SWEEP_NAME / "jobs" / "job-000.sbatch", stubs, tmp_path)
    assert ran.proc.returncode == 0, ran.proc.stderr[-1000:]
    assert srun_python(ran.srun[0][0]) == value
    assert not canary.exists()


@pytest.mark.parametrize("name", ["newline", "single_quotes", "ifs", "backslash", "crlf"])
def test_hydra_quoted_env_value_round_trips_or_is_refused(name, tmp_path, stubs):
    canary = tmp_path / "CANARY"
    value = hostile(name, canary)
    results = tmp_path / "results"
    rc, out, err = cli(
        [
            "run",
            *DEV,
            f"cluster.env=[{hydra_quote('HOSTILE=' + value)}]",
            f"sweep.results_dir={results}",
            f"sweep.name={SWEEP_NAME}",
            "--dry-run",
        ]
    )
    if name not in ACCEPTS["cluster.env:value"]:
        assert_refused(rc, out, err, "cluster.env", tmp_path)
        return
    assert rc == 0, err
    assert f"HOSTILE={env_rendered(value)}" in shell_words(out)
    ran = run_script(results / SWEEP_NAME / "jobs" / "job-000.sbatch", stubs, tmp_path)
    assert ran.proc.returncode == 0 and ran.srun[0][1]["HOSTILE"] == env_expanded(value)
    assert not canary.exists()


@pytest.fixture
def recipes(tmp_path) -> Path:
    from launcher.config.compose import PACKAGED_RECIPES

    d = tmp_path / "recipes"
    shutil.copytree(PACKAGED_RECIPES, d)
    return d


def yaml_string(value: str) -> str:
    """A YAML double-quoted scalar (escapes NUL and the rest), with OmegaConf's `${` escaped."""
    import json

    return json.dumps(value.replace("${", "\\${"))


YAML_NUL = [
    ("python", "/usr/bin/py\x00thon", "cluster.python"),
    ("partition", "debug\x00x", "cluster.partition"),
    ("env", ["HOSTILE=a\x00b"], "cluster.env"),
    ("setup", ["echo a\x00touch CANARY"], "cluster.setup"),
    ("sbatch_extra", ["--comment=a\x00b"], "cluster.sbatch_extra"),
]


@pytest.mark.parametrize("key, value, field", YAML_NUL, ids=[k for k, _, _ in YAML_NUL])
def test_yaml_nul_is_refused(key, value, field, recipes, tmp_path):
    rendered_value = yaml_string(value) if isinstance(value, str) else "[" + ", ".join(map(yaml_string, value)) + "]"
    (recipes / "cluster" / "hostile.yaml").write_text(f"defaults:\n  - devcluster\n{key}: {rendered_value}\n")
    rc, out, err = cli(
        ["sweep", "--recipes", str(recipes), "cluster=hostile", *NO_SLURM, f"sweep.results_dir={tmp_path / 'results'}"]
    )
    shutil.rmtree(recipes)
    assert_refused(rc, out, err, field, tmp_path)


def test_yaml_nul_in_results_dir_is_refused(recipes, tmp_path):
    (recipes / "sweep" / "hostile.yaml").write_text(
        f"defaults:\n  - default\nresults_dir: {yaml_string(str(tmp_path / 'r') + chr(0) + 'x')}\n"
    )
    rc, out, err = cli(["sweep", "--recipes", str(recipes), "sweep=hostile"])
    shutil.rmtree(recipes)
    assert_refused(rc, out, err, "sweep.results_dir", tmp_path)


# Recipe files and interpolations the loader rejects: one line naming the key, or the file and line.
COMPOSE_HOLES = [
    ("interpolation", None, ["cluster.env=['X=${IFS}']"], "cluster.env"),
    ("yaml_syntax", "name: devcluster\nkind: slurm\npartition: [unclosed\n", [], "hostile.yaml, line 3"),
    ("yaml_duplicate_key", "name: devcluster\nname: other\nkind: slurm\n", [], "name"),
    ("yaml_python_tag", "name: devcluster\nkind: slurm\npython: !!python/object:os.system x\n", [], "python"),
    ("yaml_unknown_key", "defaults:\n  - devcluster\nresults_dir: x\n", [], "results_dir"),
]


@pytest.mark.parametrize("name, recipe, overrides, field", COMPOSE_HOLES, ids=[h[0] for h in COMPOSE_HOLES])
def test_compose_errors_name_the_key_in_one_line(name, recipe, overrides, field, recipes, tmp_path):
    cluster = "cluster=devcluster"
    if recipe is not None:
        (recipes / "cluster" / "hostile.yaml").write_text(recipe)
        cluster = "cluster=hostile"
    rc, out, err = cli(
        [
            "sweep",
            "--recipes",
            str(recipes),
            cluster,
            *NO_SLURM,
            *overrides,
            f"sweep.results_dir={tmp_path / 'results'}",
        ]
    )
    shutil.rmtree(recipes)
    assert_refused(rc, out, err, field, tmp_path)


def test_conda_setup_line_renders_verbatim_before_strict_mode(tmp_path):
    line = "source $(conda info --base)/etc/profile.d/conda.sh"
    rc, out, err = cli(["run", *DEV, f"cluster.setup=['{line}']", f"sweep.results_dir={tmp_path}", "--dry-run"])
    assert rc == 0, err
    assert f"\n{line}\n" in out and out.index(line) < out.index("set -euo pipefail\n")


def test_setup_line_reading_an_unset_variable_does_not_abort(tmp_path, stubs):
    """Conda's activate scripts read unset variables: setup lines run before `set -u`."""
    results = tmp_path / "results"
    setup = ['echo "conda prompt ${PS1_NEVER_SET_XYZ}" > "$STUB_LOG/setup-ran"']
    rc, _, err = cli(
        argv_for("dry-run", None), {"cluster.setup": setup, "sweep.results_dir": str(results), "sweep.name": SWEEP_NAME}
    )
    assert rc == 0, err
    ran = run_script(results / SWEEP_NAME / "jobs" / "job-000.sbatch", stubs, tmp_path)
    assert ran.proc.returncode == 0, ran.proc.stderr
    assert (ran.log / "setup-ran").read_text() == "conda prompt \n" and len(ran.srun) == 1


def test_strict_mode_is_on_after_the_setup_lines(tmp_path, stubs):
    """The launcher's own part runs under `set -u`: an unset variable there stops the script."""
    results = tmp_path / "results"
    rc, _, err = cli(argv_for("dry-run", None), {"sweep.results_dir": str(results), "sweep.name": SWEEP_NAME})
    assert rc == 0, err
    script = results / SWEEP_NAME / "jobs" / "job-000.sbatch"
    ran = run_script(script, stubs, tmp_path)
    assert ran.proc.returncode == 0
    (tmp_path / "stub-log").rename(tmp_path / "first-log")
    env_less = script.read_text().replace('"$SLURM_JOB_NODELIST"', '"$SLURM_JOB_NODELIST_UNSET"')
    script.write_text(env_less)
    ran = run_script(script, stubs, tmp_path)
    assert ran.proc.returncode != 0 and "unbound variable" in ran.proc.stderr and ran.srun == []


SECRET_NAMES = [
    "API_KEY",
    "WANDB_TOKEN",
    "WANDB_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "GITHUB_TOKEN",
    "DB_PASSWORD",
    "MYSQL_PASSWD",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SSH_PRIVATE_KEY",
    "my_secret",
    "ApiKey",
]


@pytest.mark.parametrize("command", ["sweep", "dry-run"])
@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_looking_env_names_are_refused(name, command, tmp_path):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    rc, out, err = cli(
        argv_for(command, None),
        {"cluster.env": ["NCCL_DEBUG=WARN", f"{name}={secret}"], "sweep.results_dir": str(tmp_path / "results")},
    )
    assert_refused(rc, out, err, "cluster.env", tmp_path)
    assert name in err and "secret" in err and secret not in err


def test_submitting_shell_environment_never_reaches_the_sweep_folder(tmp_path, monkeypatch):
    """Real Hydra, real dry run: secret-looking variables of the submitting shell appear in no file
    the launcher writes (script, sweep.json, trial.json)."""
    for key, value in MARKERS.items():
        monkeypatch.setenv(key, value)
    rc, out, err = cli(
        ["run", *DEV, "cluster.env=['NCCL_DEBUG=WARN']", f"sweep.results_dir={tmp_path}", "sweep.name=env", "--dry-run"]
    )
    assert rc == 0, err
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sbatch" for p in files) and any(p.name == "trial.json" for p in files)
    for p in files:
        text = p.read_text()
        for marker in MARKERS.values():
            assert marker not in text, f"{p.name} holds the submitting shell's {marker}"
    assert "export NCCL_DEBUG=WARN\n" in out
