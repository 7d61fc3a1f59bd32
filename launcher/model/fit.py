"""Calibrating the step-time model (see `step`) on measured trials.

`fit` works in two stages: the links (B, α) from measured all-reduces, then (c, e, o) from
measured step times given those links. Both stages are weighted least squares on a relative
scale, because step and all-reduce times span orders of magnitude and a 1 ms miss matters at
5 ms, not at 5 s: step times each on their own, all-reduces on their trial's gradient-sized one.
Bounds are handled exactly by enumerating active sets, which is cheap with at most three
unknowns. How sure the model is comes from refitting without each shape in turn (see
`interval`). Pure: no I/O, no torch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from launcher.model.interval import Scatter, repeat_noise, scatter
from launcher.model.links import Link, ring_terms
from launcher.model.step import MIN_REL_HALF_WIDTH, PARAMS, Observation, PerfModel, Shape, comm_full_s

SIGMA_WITHOUT_DOF = 0.10
"""Relative std the intervals assume when a fit has neither enough shapes to hold one out nor
repeats to measure noise on. An assumption, never reported as a measurement: see
PerfModel.rel_sigma_measured and rel_sigma_holdout."""

GAMMAS = tuple(round(0.5 + 0.02 * k, 2) for k in range(101))
"""Contention exponents γ tried by the profile fit: 0.5 to 2.5 in steps of 0.02."""


def _bounded_lstsq(a: np.ndarray, y: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """min ‖a v − y‖ subject to lower ≤ v ≤ upper, and the indices left strictly free.

    The optimum of a convex bounded least squares is the unconstrained optimum on the face of the
    box it lies on, so trying every face (each variable free, at its lower or at its upper bound)
    and keeping the best feasible solution is exact. That is 3^k solves: fine for k ≤ 3.
    """
    k = a.shape[1]
    # Columns differ by many orders of magnitude (bytes vs hops); scaling keeps lstsq honest.
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a_s = a / norms
    best: tuple[float, np.ndarray, list[int]] | None = None
    choices = [("free", "low") + (("high",) if math.isfinite(upper[j]) else ()) for j in range(k)]
    for combo in itertools.product(*choices):
        v = np.where(np.array(combo) == "high", upper, lower).astype(float)
        free = [j for j in range(k) if combo[j] == "free"]
        if free:
            fixed = [j for j in range(k) if combo[j] != "free"]
            rhs = y - a[:, fixed] @ v[fixed]
            sol = np.linalg.lstsq(a_s[:, free], rhs, rcond=None)[0] / norms[free]
            tol = 1e-9 * np.maximum(1.0, np.abs(sol))
            if np.any(sol < lower[free] - tol) or np.any(sol > upper[free] + tol):
                continue
            v[free] = np.clip(sol, lower[free], upper[free])
        cost = float(np.sum((a @ v - y) ** 2))
        if best is None or cost < best[0] - 1e-15 * max(1.0, cost):
            best = (cost, v, free)
    assert best is not None  # the all-at-bounds face is always feasible
    return best[1], best[2]


def _nonnegative(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """min ‖a v − y‖ with every v ≥ 0."""
    k = a.shape[1]
    return _bounded_lstsq(a, y, np.zeros(k), np.full(k, np.inf))[0]


def _rank(x: np.ndarray) -> int:
    """Rank of a design after normalising its columns, so magnitudes do not pass for directions."""
    norms = np.linalg.norm(x, axis=0)
    keep = norms > 0
    if not keep.any():
        return 0
    return int(np.linalg.matrix_rank(x[:, keep] / norms[keep], tol=1e-9))


# --- Stage 1: the links ------------------------------------------------------------------------


def _fit_link(samples: list[tuple[int, int, float, float]], preset: Link, label: str) -> tuple[Link, str]:
    """Stage 1 for one link class: (B, α) from measured all-reduces (n, bytes, seconds, and the
    seconds of the largest all-reduce its trial measured), least squares on that trial's scale."""
    usable = [(n, b, t, ref) for n, b, t, ref in samples if n >= 2]
    if not usable:
        return preset, f"preset {preset.name or 'link'} (no {label} all-reduces over ≥ 2 ranks measured)"
    x = np.array([ring_terms(b, n) for n, b, _, _ in usable])
    t = np.array([s for _, _, s, _ in usable])
    # Rows divided by their trial's largest all-reduce (the gradient's, which steps pay): trials
    # from 10 µs to 1 s weigh alike, and within one a miss counts as a share of what the step
    # pays, not of a probe 64× smaller. Dividing each row by its own time instead let the small
    # probes' latency steer the bandwidth: on the bed (CPU-throttled ranks, latency that overlaps
    # transfer) that read 36 MB/s off a 25 MB/s link.
    ref = np.array([r for _, _, _, r in usable])
    a, y = x / ref[:, None], t / ref
    name = f"{preset.name} (fitted)" if preset.name else "fitted"
    if not np.any(x[:, 0] > 0):
        # Only empty messages: latency is all they show.
        link = _latency_under_preset(a, y, preset, name)
        return link, f"latency fitted from {len(t)} zero-byte all-reduces; bandwidth preset {preset.name or 'link'}"
    if _rank(x) >= 2:
        return _fit_bandwidth_and_latency(a, y, preset, name)
    return _fit_bandwidth_only(a, y, t, preset, name)


def _latency_under_preset(a: np.ndarray, y: np.ndarray, preset: Link, name: str) -> Link:
    """α fitted with the bandwidth held at the preset's (columns of `a`: bytes, hops; `y` the
    times, both on the trials' scale)."""
    preset_inv_bw = 1.0 / (preset.bandwidth_gbps * 1e9)
    (alpha,) = _nonnegative(a[:, [1]], y - a[:, 0] * preset_inv_bw)
    return Link(bandwidth_gbps=preset.bandwidth_gbps, latency_s=float(alpha), name=name)


def _fit_bandwidth_and_latency(a: np.ndarray, y: np.ndarray, preset: Link, name: str) -> tuple[Link, str]:
    """Several (size, ranks) directions: both B and α are visible."""
    m = len(a)
    inv_bw, alpha = _nonnegative(a, y)
    if inv_bw > 0:
        note = " (latency at bound 0)" if alpha == 0 else ""
        link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=float(alpha), name=name)
        return link, f"fitted from {m} all-reduces: bandwidth and latency{note}"
    # Times flat in message size: no bandwidth to see, so keep the preset and fit α under it.
    return _latency_under_preset(a, y, preset, name), (
        f"latency fitted from {m} all-reduces; bandwidth preset {preset.name or 'link'} "
        "(times do not grow with message size)"
    )


def _fit_bandwidth_only(a: np.ndarray, y: np.ndarray, t: np.ndarray, preset: Link, name: str) -> tuple[Link, str]:
    """One direction only (one rank count and one message size): the split between bandwidth and
    latency is invisible, so trust the preset latency and attribute the rest to bandwidth."""
    m = len(a)
    (inv_bw,) = _nonnegative(a[:, [0]], y - a[:, 1] * preset.latency_s)
    if inv_bw > 0:
        link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=preset.latency_s, name=name)
        return link, (
            f"bandwidth fitted from {m} all-reduces; latency preset {preset.name or 'link'} "
            f"{preset.latency_s:g} s (one direction of (size, ranks) cannot separate them)"
        )
    # The preset latency alone already exceeds the measured times: it is wrong for this link.
    (inv_bw,) = _nonnegative(a[:, [0]], y)
    link = Link(bandwidth_gbps=float(1.0 / (inv_bw * 1e9)), latency_s=0.0, name=name)
    return link, (
        f"bandwidth fitted from {m} all-reduces; latency set to 0 (preset {preset.latency_s:g} s "
        f"alone exceeds the measured {float(t.min()):g} s)"
    )


def _fit_links(obs: Sequence[Observation], intra: Link, inter: Link) -> tuple[Link, Link, dict[str, str]]:
    """Both link classes, each from the all-reduces of the trials that used it."""
    def scaled(o: Observation) -> list[tuple[int, int, float, float]]:
        ref = max((s for _, _, s in o.allreduce), default=0.0)
        return [(n, b, s, ref) for n, b, s in o.allreduce]

    intra_ar = [m for o in obs if not o.shape.multi_node for m in scaled(o)]
    inter_ar = [m for o in obs if o.shape.multi_node for m in scaled(o)]
    intra_fit, intra_src = _fit_link(intra_ar, intra, "intra-node")
    inter_fit, inter_src = _fit_link(inter_ar, inter, "inter-node")
    return intra_fit, inter_fit, {"intra": intra_src, "inter": inter_src}


# --- Stage 2: the step parameters (c, e, o) ----------------------------------------------------


@dataclass(kw_only=True, frozen=True)
class _StepFit:
    """Stage 2's result at one contention exponent γ."""

    params: tuple[float, float, float]
    """(c, e, o), fitted or fixed."""
    free_idx: tuple[int, ...]
    """Indices into PARAMS estimated freely (not fixed, not at a bound), in the order of `cov`."""
    n_parameters: int
    """p: parameters solved for (free or at a bound), i.e. not fixed beforehand."""
    sigma_measured: float | None
    """Relative residual std on n − p degrees of freedom; None when n ≤ p."""
    cov: tuple[tuple[float, ...], ...]
    """Covariance of the free parameters on the relative scale."""
    sources: dict[str, str]
    """Where each of c, e, o came from."""
    sse: float
    """Sum of squared relative residuals, what the γ profile minimises."""
    gamma: float
    """The contention exponent this fit assumed."""


_HELD_AT = {1: 1.0, 2: 0.0}
"""Value of a term the trials cannot determine: exposure 1 (no overlap: the conservative
choice) and overhead 0 (whatever it is, compute absorbs it)."""


def _design(obs: Sequence[Observation], intra: Link, inter: Link, gamma: float) -> np.ndarray:
    """Rows of step_s = x · (c, e, o): compute work over (1 − bubble), the full all-reduce, 1."""
    return np.array([
        [o.shape.work_per_rank * o.shape.contention**gamma / (1.0 - o.shape.bubble),
         comm_full_s(o.shape, inter if o.shape.multi_node else intra), 1.0]
        for o in obs
    ])  # fmt: skip


def _fixed_terms(x: np.ndarray) -> dict[int, tuple[float, str]]:
    """Terms the trials cannot determine, each with the value it is held at and why. Overhead
    goes first (it is the least informative term), then the exposure."""
    n = len(x)
    fixed: dict[int, tuple[float, str]] = {}
    if not np.any(x[:, 1] > 0):
        fixed[1] = (_HELD_AT[1], "fixed at 1 (no trial communicates, so exposure is unidentifiable)")
    for j in (2, 1):
        value = _HELD_AT[j]
        if j not in fixed and n < 3 - len(fixed):
            fixed[j] = (value, f"fixed at {value:g} ({n} step time{'s' * (n != 1)} for {3 - len(fixed)} parameters)")
    return _fix_inseparable(x, fixed)


def _fix_inseparable(x: np.ndarray, fixed: dict[int, tuple[float, str]]) -> dict[int, tuple[float, str]]:
    """`fixed` plus the fewest terms whose columns move with the others, overhead before exposure."""

    def deficient(drop: tuple[int, ...]) -> bool:
        cols = [i for i in range(3) if i not in fixed and i not in drop]
        return _rank(x[:, cols]) < len(cols)

    if not deficient(()):
        return fixed
    candidates = [d for d in ((2,), (1,), (2, 1)) if not set(d) & set(fixed)]
    drop = next((d for d in candidates if not deficient(d)), candidates[-1] if candidates else ())
    why = "not separable from the other terms in these trials"
    return {**fixed, **{j: (_HELD_AT[j], f"fixed at {_HELD_AT[j]:g} ({why})") for j in drop}}


def _solve(x: np.ndarray, y: np.ndarray, fixed: dict[int, tuple[float, str]]) -> tuple[np.ndarray, list[int], list[int]]:
    """Bounded relative least squares for the terms not fixed: (c, e, o), the columns solved for,
    and those of them left strictly inside their bounds."""
    a = x / y[:, None]
    target = np.ones(len(y))
    for j, (value, _) in fixed.items():
        target = target - a[:, j] * value
    cols = [i for i in range(3) if i not in fixed]
    lower = np.array([0.0, 0.0, 0.0])[cols]
    upper = np.array([np.inf, 1.0, np.inf])[cols]
    sol, free_local = _bounded_lstsq(a[:, cols], target, lower, upper)
    params = np.array([fixed[j][0] if j in fixed else 0.0 for j in range(3)])
    params[cols] = sol
    return params, cols, [cols[i] for i in free_local]


def _step_sources(n: int, params: np.ndarray, cols: list[int], free_idx: list[int],
                  fixed: dict[int, tuple[float, str]]) -> dict[str, str]:  # fmt: skip
    sources: dict[str, str] = {}
    for j in cols:
        if j in free_idx:
            sources[PARAMS[j]] = f"fitted from {n} step times"
        else:
            bound = "1" if params[j] == 1.0 and j == 1 else "0"
            sources[PARAMS[j]] = f"fitted from {n} step times; at bound {bound}"
    for j, (_, why) in fixed.items():
        sources[PARAMS[j]] = why
    return sources


def _fit_steps(obs: Sequence[Observation], intra: Link, inter: Link, gamma: float) -> _StepFit:
    """Stage 2 at a given contention exponent γ: bounded relative least squares for c, e, o."""
    n = len(obs)
    y = np.array([o.step_s for o in obs])
    x = _design(obs, intra, inter, gamma)
    fixed = _fixed_terms(x)
    params, cols, free_idx = _solve(x, y, fixed)
    rel_resid = (y - x @ params) / y
    sse = float(rel_resid @ rel_resid)
    p = len(cols)
    measured = math.sqrt(sse / (n - p)) if n > p else None
    # Intervals still need a scatter when none could be measured; they assume one, and the model
    # records that it was not measured (sigma_measured None) so no report shows it as a residual.
    sigma = SIGMA_WITHOUT_DOF if measured is None else measured
    cov: tuple[tuple[float, ...], ...] = ()
    if free_idx:
        af = (x / y[:, None])[:, free_idx]
        cov = tuple(tuple(float(v) for v in row) for row in sigma**2 * np.linalg.pinv(af.T @ af))
    return _StepFit(params=(float(params[0]), float(params[1]), float(params[2])), free_idx=tuple(free_idx),
                    n_parameters=p, sigma_measured=measured, cov=cov, sse=sse, gamma=gamma,
                    sources=_step_sources(n, params, cols, free_idx, fixed))  # fmt: skip


def _profile_gamma(obs: Sequence[Observation], intra: Link, inter: Link) -> tuple[_StepFit, str]:
    """Stage 2 at the best contention exponent γ (profile least squares) when trials differ in
    contention and there are enough of them to tell γ from c, else at γ = 1; and where γ came from.
    Dedicated compute (contention 1 everywhere) has no exponent to fit: γ is not a parameter there."""
    levels = {o.shape.contention for o in obs}
    if levels == {1.0}:
        return _fit_steps(obs, intra, inter, 1.0), "not fitted (every trial had dedicated compute: contention 1)"
    if not (len(levels) > 1 and len(obs) > 4):
        return _fit_steps(obs, intra, inter, 1.0), "fixed at 1 (contention did not vary, or too few trials to fit it)"
    best = min((_fit_steps(obs, intra, inter, g) for g in GAMMAS), key=lambda r: r.sse)
    return best, f"fitted from {len(obs)} step times (profile over {GAMMAS[0]:g}–{GAMMAS[-1]:g})"


# --- How sure: held-out error and repeat noise --------------------------------------------------


def _shape_groups(obs: Sequence[Observation]) -> dict[Shape, list[int]]:
    """Indices of the trials of each shape: repeats of one configuration form one group."""
    groups: dict[Shape, list[int]] = {}
    for i, o in enumerate(obs):
        groups.setdefault(o.shape, []).append(i)
    return groups


def _holdout_errors(obs: Sequence[Observation], intra: Link, inter: Link, gamma: float) -> list[float]:
    """Relative error of every trial as predicted by both stages refitted without its shape's
    trials (all its repeats, so a twin cannot vouch for it), at the fit's contention exponent."""
    errors = []
    for idx in _shape_groups(obs).values():
        train = [o for i, o in enumerate(obs) if i not in idx]
        intra_g, inter_g, _ = _fit_links(train, intra, inter)
        params = np.array(_fit_steps(train, intra_g, inter_g, gamma).params)
        held = [obs[i] for i in idx]
        predicted = _design(held, intra_g, inter_g, gamma) @ params
        errors += [(o.step_s - p) / o.step_s for o, p in zip(held, predicted)]
    return errors


def _scatter(obs: Sequence[Observation], intra: Link, inter: Link, best: _StepFit,
             level: float) -> tuple[Scatter, float | None, float | None]:  # fmt: skip
    """The interval's scatter (interval.scatter) and the numbers behind it: held-out RMS error
    when more shapes than parameters leave a degree of freedom, and the repeat noise."""
    groups = _shape_groups(obs)
    # Degrees of freedom counted in shapes, not trials: a shape's repeats share one refit's error,
    # so they are not independent draws of it (counting trials gave 75% coverage, not 90%, on a
    # synthetic misfit extrapolated one size out).
    dof = len(groups) - best.n_parameters
    holdout = None
    if dof > 0:
        errors = np.array(_holdout_errors(obs, intra, inter, best.gamma))
        holdout = float(math.sqrt(np.mean(errors**2)))
    repeat, repeat_dof = repeat_noise([[obs[i].step_s for i in idx] for idx in groups.values()])
    found = scatter(holdout=holdout, holdout_dof=dof, repeat=repeat, repeat_dof=repeat_dof,
                    assumed=SIGMA_WITHOUT_DOF, level=level)  # fmt: skip
    return found, holdout, repeat


def fit(observations: Sequence[Observation], *, intra: Link, inter: Link, level: float = 0.9) -> PerfModel:
    """Calibrate a model on measured trials; `intra`/`inter` are presets for what the data cannot
    show; `level` is the nominal coverage of its prediction intervals."""
    obs = list(observations)
    if not obs:
        raise ValueError("fit needs at least 1 observation, got 0")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    intra_fit, inter_fit, sources = _fit_links(obs, intra, inter)
    best, gamma_source = _profile_gamma(obs, intra_fit, inter_fit)
    found, holdout, repeat = _scatter(obs, intra, inter, best, level)
    sources = {**sources, **best.sources, "contention_exponent": gamma_source, "interval": found.source}
    c, e, o = best.params
    return PerfModel(
        compute_s_per_sample=c,
        exposed_comm=min(1.0, max(0.0, e)),
        overhead_s=o,
        intra=intra_fit,
        inter=inter_fit,
        rel_sigma=found.sigma,
        rel_sigma_measured=best.sigma_measured,
        rel_sigma_holdout=holdout,
        rel_sigma_repeat=repeat,
        level=level,
        param_var_in_sigma=(best.sigma_measured or 0.0) ** 2 * len(best.free_idx) / len(obs) if found.held_out else 0.0,
        n_parameters=best.n_parameters,
        z=found.quantile,
        free=tuple(PARAMS[j] for j in best.free_idx),
        cov=best.cov,
        min_rel_half_width=MIN_REL_HALF_WIDTH,
        sources=tuple(sorted(sources.items())),
        n_observations=len(obs),
        contention_exponent=best.gamma,
    )
