"""Win rates against the reference outputs, raw and length-controlled (AlpacaEval 2.0 style).

Preferences use AlpacaEval's encoding: 1 = the reference output is preferred, 2 = the model's
output is preferred, 1.5 = a draw. With p = preference - 1 (the model's win probability):

- `win_rate` = 100 * mean(p); `standard_error` = 100 * sem(p) (sample std / sqrt(n));
- `discrete_win_rate` = 100 * (wins + draws / 2) / n (identical to `win_rate` for our discrete
  judge);
- **length-controlled win rate** (Dubois et al. 2024, "Length-Controlled AlpacaEval"): fit a
  logistic regression of the judge's preference on the length difference,

      logit P(model preferred on item i) = theta + phi * tanh(d_i / sd(d)),
      d_i = len(model output_i) - len(reference output_i)   (characters),

  by maximum likelihood with the probabilistic labels p_i and an L2 penalty |beta|^2 / (2 C),
  C = 100; then predict with no length difference (d_i = 0): LC = 100 * sigmoid(theta).

This simplified fit is used when AlpacaEval's public table `df_gamed.csv` is not staged with the
held-out data; when it is, both protocols compute the exact `length_controlled_v1` GLM instead
(`glm.py`; metric `lc_glm` = 1, evaluator version suffix `+lc-glm`).

What we simplify relative to AlpacaEval's `length_controlled_v1` GLM (documented in docs/tasks.md):
its formula also has an instruction-difficulty term gamma_i (estimated once from the public
leaderboard's annotations) and it regularises toward "gamed" baselines (verbose/concise variants
of the reference model, weight 0.2), and picks an L1 strength by 5-fold cross-validation. Both
extra terms need AlpacaEval's precomputed leaderboard data, which is not available offline and
is tied to the GPT-4 reference; we drop them and use a fixed, weak L2 penalty instead (the
length coefficient is therefore estimated from the evaluated model's own items only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

PREF_REFERENCE = 1.0
PREF_DRAW = 1.5
PREF_MODEL = 2.0
#: Inverse L2 strength of the length GLM (AlpacaEval's non-CV fallback uses C = 100).
GLM_C = 100.0


@dataclass(frozen=True)
class WinRates:
    length_controlled_winrate: float
    win_rate: float
    standard_error: float
    discrete_win_rate: float
    n_wins: int
    n_wins_base: int
    n_draws: int
    n_total: int
    avg_length: float
    lc_intercept: float
    lc_length_coef: float

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


def _objective(beta: np.ndarray, x: np.ndarray, p: np.ndarray, c: float) -> float:
    z = x @ beta
    # -[p log s(z) + (1-p) log(1-s(z))] = logaddexp(0, z) - p z
    return float(np.sum(np.logaddexp(0.0, z) - p * z) + beta @ beta / (2.0 * c))


def fit_length_glm(
    p: Sequence[float] | np.ndarray, feature: Sequence[float], c: float = GLM_C, max_iter: int = 100
) -> tuple[float, float]:
    """(theta, phi) of logit P = theta + phi * feature, fitted to probabilistic labels `p` in [0, 1]
    (penalised maximum likelihood; Newton's method with backtracking, so deterministic)."""
    pv = np.asarray(p, dtype=float)
    x = np.column_stack([np.ones(len(pv)), np.asarray(feature, dtype=float)])
    beta = np.zeros(2)
    obj = _objective(beta, x, pv, c)
    for _ in range(max_iter):
        s = _sigmoid(x @ beta)
        grad = x.T @ (s - pv) + beta / c
        hess = (x.T * (s * (1.0 - s))) @ x + np.eye(2) / c
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            cand = beta - t * step
            cand_obj = _objective(cand, x, pv, c)
            if cand_obj <= obj or t < 1e-8:
                break
            t /= 2.0
        beta, improvement = cand, obj - cand_obj
        obj = cand_obj
        if float(np.max(np.abs(t * step))) < 1e-10 or improvement < 1e-14:
            break
    return float(beta[0]), float(beta[1])


def length_feature(model_lengths: Sequence[int], reference_lengths: Sequence[int]) -> list[float]:
    """tanh of the standardised length difference (model minus reference); zeros when it does not vary."""
    d = np.asarray(model_lengths, dtype=float) - np.asarray(reference_lengths, dtype=float)
    if len(d) < 2:
        return [0.0] * len(d)
    sd = float(np.std(d, ddof=1))
    if not math.isfinite(sd) or sd == 0.0:
        return [0.0] * len(d)
    return [float(v) for v in np.tanh(d / sd)]


def win_rates(
    preferences: Sequence[float], model_lengths: Sequence[int], reference_lengths: Sequence[int]
) -> WinRates:
    """All win-rate metrics of one model against the references (see the module docstring)."""
    n = len(preferences)
    if n == 0:
        raise ValueError("no preferences to compute a win rate from")
    if not (len(model_lengths) == len(reference_lengths) == n):
        raise ValueError("preferences and lengths differ in number")
    for v in preferences:
        if not PREF_REFERENCE <= v <= PREF_MODEL:
            raise ValueError(f"preference {v} is outside [1, 2]")
    p = np.asarray(preferences, dtype=float) - 1.0
    wins = int(np.sum(p > 0.5))
    losses = int(np.sum(p < 0.5))
    draws = n - wins - losses
    sem = float(np.std(p, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    theta, phi = fit_length_glm(p, length_feature(model_lengths, reference_lengths))
    return WinRates(
        length_controlled_winrate=100.0 * float(_sigmoid(np.array([theta]))[0]),
        win_rate=100.0 * float(np.mean(p)),
        standard_error=100.0 * sem,
        discrete_win_rate=100.0 * (wins + 0.5 * draws) / n,
        n_wins=wins,
        n_wins_base=losses,
        n_draws=draws,
        n_total=n,
        avg_length=float(np.mean(np.asarray(model_lengths, dtype=float))),
        lc_intercept=theta,
        lc_length_coef=phi,
    )
