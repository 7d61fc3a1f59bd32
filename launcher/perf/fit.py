"""Calibrating the step-time model (see `step`) on measured trials.

`fit` works in two stages: the links (B, α) from measured collectives (`fit_links`), then
(c, u, o) from measured step times given those links. Both stages are weighted least squares on
a relative scale, because step and all-reduce times span orders of magnitude and a 1 ms miss matters at
5 ms, not at 5 s: step times each on their own, all-reduces on their trial's gradient-sized one.
Bounds are handled exactly by enumerating active sets, which is cheap with at most three
unknowns. How sure the model is comes from refitting without each shape in turn (see
`interval`). Pure: no I/O, no torch.

Communication enters the fit as the overlap model says (`overlap.comm_terms`): what it leaves
exposed, X, is charged whole, and u, the share of what it credits compute with hiding (T − X)
that the trials show exposed after all, is fitted: the exposed fraction is measured, not
assumed. X and T − X depend on the compute they hide under (the backward window is c·w·β), so
the design depends on c: stage 2 iterates, each round's exposures at the previous round's c,
until c settles (a fixed point; a few rounds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from launcher.perf.fit_links import fit_links
from launcher.perf.interval import Scatter, repeat_noise, scatter
from launcher.perf.links import Link
from launcher.perf.lstsq import bounded_lstsq, rank
from launcher.perf.step import MIN_REL_HALF_WIDTH, PARAMS, Observation, PerfModel, Shape, comm_at

SIGMA_WITHOUT_DOF = 0.10
"""Relative std the intervals assume when a fit has neither enough shapes to hold one out nor
repeats to measure noise on. An assumption, never reported as a measurement: see
PerfModel.rel_sigma_measured and rel_sigma_holdout."""

GAMMAS = tuple(round(0.5 + 0.02 * k, 2) for k in range(101))
"""Contention exponents γ tried by the profile fit: 0.5 to 2.5 in steps of 0.02."""

FIXED_POINT_ROUNDS = 30
"""Most rounds of stage 2's fixed point on c (the exposures depend on it); it settles in a few."""


# --- Stage 2: the step parameters (c, u, o) ----------------------------------------------------


@dataclass(kw_only=True, frozen=True)
class _StepFit:
    """Stage 2's result at one contention exponent γ."""

    params: tuple[float, float, float]
    """(c, u, o), fitted or fixed."""
    free_idx: tuple[int, ...]
    """Indices into PARAMS estimated freely (not fixed, not at a bound), in the order of `cov`."""
    n_parameters: int
    """p: parameters solved for (free or at a bound), i.e. not fixed beforehand."""
    sigma_measured: float | None
    """Relative residual std on n − p degrees of freedom; None when n ≤ p."""
    cov: tuple[tuple[float, ...], ...]
    """Covariance of the free parameters on the relative scale."""
    sources: dict[str, str]
    """Where each of c, u, o came from."""
    sse: float
    """Sum of squared relative residuals, what the γ profile minimises."""
    gamma: float
    """The contention exponent this fit assumed."""


_HELD_AT = {1: 0.0, 2: 0.0}
"""Value of a term the trials cannot determine: exposure share 0 (the overlap model as it
stands) and overhead 0 (whatever it is, compute absorbs it)."""


def _design(
    obs: Sequence[Observation], intra: Link, inter: Link, gamma: float, c: float
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of step_s = X + x · (c, u, o) with the exposures at compute rate `c`: compute work
    over (1 − bubble), the communication the overlap model hides (T − X), 1; and each row's X,
    the communication it leaves exposed."""
    rows, exposed = [], []
    for o in obs:
        work = o.shape.compute_work(gamma)
        terms = comm_at(o.shape, intra, inter, c * work)
        rows.append([work / (1.0 - o.shape.bubble), terms.hidden_s, 1.0])
        exposed.append(terms.exposed_s)
    return np.array(rows), np.array(exposed)


def _predict_rows(x: np.ndarray, exposed: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Step times as PerfModel.predict makes them."""
    return exposed + x @ params


def _fixed_terms(x: np.ndarray) -> dict[int, tuple[float, str]]:
    """Terms the trials cannot determine, each with the value it is held at and why. Overhead
    goes first (it is the least informative term), then the exposure."""
    n = len(x)
    fixed: dict[int, tuple[float, str]] = {}
    if not np.any(x[:, 1] > 0):
        fixed[1] = (
            _HELD_AT[1],
            "fixed at 0 (no trial has communication the overlap model hides, so its exposed share is unidentifiable)",
        )
    for j in (2, 1):
        value = _HELD_AT[j]
        if j not in fixed and n < 3 - len(fixed):
            fixed[j] = (value, f"fixed at {value:g} ({n} step time{'s' * (n != 1)} for {3 - len(fixed)} parameters)")
    return _fix_inseparable(x, fixed)


def _fix_inseparable(x: np.ndarray, fixed: dict[int, tuple[float, str]]) -> dict[int, tuple[float, str]]:
    """`fixed` plus the fewest terms whose columns move with the others, overhead before exposure."""

    def deficient(drop: tuple[int, ...]) -> bool:
        cols = [i for i in range(3) if i not in fixed and i not in drop]
        return rank(x[:, cols]) < len(cols)

    if not deficient(()):
        return fixed
    candidates = [d for d in ((2,), (1,), (2, 1)) if not set(d) & set(fixed)]
    drop = next((d for d in candidates if not deficient(d)), candidates[-1] if candidates else ())
    why = "not separable from the other terms in these trials"
    return {**fixed, **{j: (_HELD_AT[j], f"fixed at {_HELD_AT[j]:g} ({why})") for j in drop}}


def _solve(
    x: np.ndarray, y: np.ndarray, exposed: np.ndarray, fixed: dict[int, tuple[float, str]]
) -> tuple[np.ndarray, list[int], list[int]]:
    """Bounded relative least squares for the terms not fixed: (c, u, o), the columns solved for,
    and those of them left strictly inside their bounds."""
    a = x / y[:, None]
    target = 1.0 - exposed / y
    for j, (value, _) in fixed.items():
        target = target - a[:, j] * value
    cols = [i for i in range(3) if i not in fixed]
    lower = np.array([0.0, 0.0, 0.0])[cols]
    upper = np.array([np.inf, 1.0, np.inf])[cols]
    sol, free_local = bounded_lstsq(a[:, cols], target, lower, upper)
    params = np.array([fixed[j][0] if j in fixed else 0.0 for j in range(3)])
    params[cols] = sol
    return params, cols, [cols[i] for i in free_local]


def _step_sources(
    n: int, params: np.ndarray, cols: list[int], free_idx: list[int], fixed: dict[int, tuple[float, str]]
) -> dict[str, str]:
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
    """Stage 2 at a given contention exponent γ: bounded relative least squares for c, u, o, the
    exposures iterated to a fixed point in c (module docstring)."""
    n = len(obs)
    y = np.array([o.step_s for o in obs])
    # The first round's exposures hide under no compute (a lower bound on c, its first estimate).
    c = 0.0
    for _ in range(FIXED_POINT_ROUNDS):
        x, exposed = _design(obs, intra, inter, gamma, c)
        fixed = _fixed_terms(x)
        params, cols, free_idx = _solve(x, y, exposed, fixed)
        settled = abs(params[0] - c) <= 1e-9 * abs(params[0])
        c = float(params[0])
        if settled:
            break
    rel_resid = (y - _predict_rows(x, exposed, params)) / y
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
    return _StepFit(
        params=(float(params[0]), float(params[1]), float(params[2])),
        free_idx=tuple(free_idx),
        n_parameters=p,
        sigma_measured=measured,
        cov=cov,
        sse=sse,
        gamma=gamma,
        sources=_step_sources(n, params, cols, free_idx, fixed),
    )


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
        intra_g, inter_g, _ = fit_links(train, intra, inter)
        params = np.array(_fit_steps(train, intra_g, inter_g, gamma).params)
        held = [obs[i] for i in idx]
        predicted = _predict_rows(*_design(held, intra_g, inter_g, gamma, params[0]), params)
        errors += [(o.step_s - p) / o.step_s for o, p in zip(held, predicted)]
    return errors


def _scatter(
    obs: Sequence[Observation], intra: Link, inter: Link, best: _StepFit, level: float
) -> tuple[Scatter, float | None, float | None]:
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
    found = scatter(
        holdout=holdout, holdout_dof=dof, repeat=repeat, repeat_dof=repeat_dof, assumed=SIGMA_WITHOUT_DOF, level=level
    )
    return found, holdout, repeat


def fit(observations: Sequence[Observation], *, intra: Link, inter: Link, level: float = 0.9) -> PerfModel:
    """Calibrate a model on measured trials; `intra`/`inter` are presets for what the data cannot
    show; `level` is the nominal coverage of its prediction intervals."""
    obs = list(observations)
    if not obs:
        raise ValueError("fit needs at least 1 observation, got 0")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    intra_fit, inter_fit, sources = fit_links(obs, intra, inter)
    best, gamma_source = _profile_gamma(obs, intra_fit, inter_fit)
    found, holdout, repeat = _scatter(obs, intra, inter, best, level)
    sources = {**sources, **best.sources, "contention_exponent": gamma_source, "interval": found.source}
    c, u, o = best.params
    return PerfModel(
        compute_s_per_sample=c,
        exposed_comm=min(1.0, max(0.0, u)),
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
