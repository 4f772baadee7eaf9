"""AlpacaEval 2.0's length-controlled win rate, `length_controlled_v1`, with its public tables.

Restated (our code) from alpaca_eval `src/alpaca_eval/metrics/glm_winrate.py`
(`get_length_controlled_winrate`, `_get_featurized_data`, `fit_LogisticRegressionCV`; read at
commit 1020da21d069684a5d21756c3d78873df4b7e8bc of tatsu-lab/alpaca_eval):

- the public table `df_gamed.csv` (tatsu-lab/alpaca_eval *dataset* repo) holds the annotations of
  the "gamed" baselines (verbose/concise prompts of the reference model): per row the instruction
  `index`, `preference` in [0, 1], `std_delta_len`, `instruction_difficulty`, `not_gamed_baseline`
  (False). The difficulty of AlpacaEval instruction g is `df_gamed.drop_duplicates("index")
  ["instruction_difficulty"][g]` — a *row-label* look-up (the first row of each index value);
- the evaluated model's rows: `delta = len(output_1) - len(output_2)` = len(reference) -
  len(model) in characters, `std_delta_len = delta / delta.std()` (sample std over all of the
  model's items), preference p = pref - 1 (1.5 for a draw), the difficulty of its index,
  `not_gamed_baseline` = True;
- formula `np.tanh(std_delta_len) + instruction_difficulty + not_gamed_baseline.astype(float) - 1`
  (no intercept) fitted on the gamed rows plus the model's rows with a readable preference,
  sample weights 1 for the model's rows and 0.2 / 2 for the gamed ones;
- the fit: sklearn `LogisticRegressionCV(penalty="l1", solver="liblinear", fit_intercept=False,
  Cs=10, cv=GroupKFold(5))` on probabilistic labels (each row duplicated with label 1 weighted
  by p and label 0 weighted by 1 - p), i.e. for each C of `logspace(-4, 4, 10)` the minimiser of
  `|w|_1 + C * sum_i s_i * [log(1 + e^{z_i}) - p_i z_i]`, `z = X w`; the C with the largest
  summed (over the 5 folds) negative weighted mean log loss (predictions clipped to
  [1e-15, 1 - 1e-15]) is refitted on all rows;
- the prediction at equal length: LC = 100 * mean_i sigmoid(w_difficulty * difficulty_i +
  w_not_gamed) over all of the model's items (those without a readable preference included).

Where we differ, on purpose: liblinear stops at tolerance 1e-4, we solve the same convex problem
to ~1e-12 (proximal Newton), so coefficients can differ from sklearn's in the 4th-5th digit;
GroupKFold's folds depend on numpy's (unstable) argsort of equal group sizes — we use the stable
order (group g of m goes to fold (m - 1 - g) mod 5, what numpy 2.4 gives here); a model whose
length differences do not vary (sample std 0 or one item) gets a zero length feature where
alpaca_eval would divide by zero.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from a2rl.errors import A2rlError

GAMED_FILE = "df_gamed.csv"
#: Weight of the gamed baselines' rows: `regularize_to_baseline_lambda` (0.2) / 2 baselines.
GAMED_WEIGHT = 0.2 / 2
N_SPLITS = 5
CS = np.logspace(-4, 4, 10)
LOGLOSS_EPS = 1e-15
GAMED_COLUMNS = ("index", "preference", "std_delta_len", "instruction_difficulty", "not_gamed_baseline")


@dataclass(frozen=True)
class GamedTable:
    """The rows of `df_gamed.csv` (in file order; NaN preference where it is empty)."""

    index: np.ndarray
    preference: np.ndarray
    std_delta_len: np.ndarray
    instruction_difficulty: np.ndarray
    not_gamed_baseline: np.ndarray

    def difficulties(self, n: int) -> np.ndarray:
        """Difficulties of instructions 0..n-1 by alpaca_eval's look-up: the row label g among the
        first row of each index value (the same as index g when the table lists 0, 1, ... first)."""
        first = first_rows(self.index)
        missing = [g for g in range(n) if g not in first]
        if missing:
            raise A2rlError(f"{GAMED_FILE}: no instruction difficulty for item(s) {missing[:5]}")
        return self.instruction_difficulty[:n].astype(float)

    def n_instructions(self) -> int:
        return len(first_rows(self.index))


@dataclass(frozen=True)
class GlmFit:
    length_controlled_winrate: float
    c: float
    length_coef: float
    difficulty_coef: float
    not_gamed_coef: float


def first_rows(index: np.ndarray) -> set[int]:
    """Row labels of the first row of each distinct `index` value (`drop_duplicates("index")`)."""
    _, first = np.unique(index, return_index=True)
    return {int(i) for i in first}


def _float(value: str) -> float:
    return math.nan if value.strip() == "" else float(value)


def _bool(value: str, path: Path) -> bool:
    if value.strip() not in ("True", "False"):
        raise A2rlError(f"{path}: not_gamed_baseline must be True or False, got {value!r}")
    return value.strip() == "True"


def read_gamed_table(path: Path) -> GamedTable:
    """Parse and check `df_gamed.csv` (columns GAMED_COLUMNS, others ignored)."""
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in GAMED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise A2rlError(f"{path}: missing column(s) {', '.join(missing)}")
        try:
            rows = [
                (int(r["index"]), _float(r["preference"]), float(r["std_delta_len"]),
                 float(r["instruction_difficulty"]), _bool(r["not_gamed_baseline"], path))
                for r in reader
            ]  # fmt: skip
        except ValueError as exc:
            raise A2rlError(f"{path}: unreadable value ({exc})") from exc
    if not rows:
        raise A2rlError(f"{path}: no rows")
    cols = list(zip(*rows, strict=True))
    table = GamedTable(*(np.asarray(c) for c in cols))
    p = table.preference[~np.isnan(table.preference)]
    if np.any((p < 0) | (p > 1)):
        raise A2rlError(f"{path}: preferences must lie in [0, 1]")
    if not (np.all(np.isfinite(table.std_delta_len)) and np.all(np.isfinite(table.instruction_difficulty))):
        raise A2rlError(f"{path}: std_delta_len and instruction_difficulty must be finite")
    return table


# --- the fit -------------------------------------------------------------------------------------


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


def l1_objective(w: np.ndarray, x: np.ndarray, p: np.ndarray, s: np.ndarray, c: float) -> float:
    """|w|_1 + C * sum_i s_i * [log(1 + e^{z_i}) - p_i z_i] (liblinear's L1 logistic loss)."""
    z = x @ w
    return float(np.sum(np.abs(w)) + c * np.sum(s * (np.logaddexp(0.0, z) - p * z)))


def _lasso_quadratic(w: np.ndarray, g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """argmin_u g.(u - w) + (u - w)' H (u - w) / 2 + |u|_1, by cyclic coordinate descent."""
    u = w.copy()
    for _ in range(10_000):
        change = 0.0
        for j in range(len(u)):
            a = h[j, j]
            b = g[j] + h[j] @ (u - w) - a * u[j]
            new = 0.0 if a <= 1e-300 else -math.copysign(max(abs(b) - 1.0, 0.0), b) / a
            change = max(change, abs(new - u[j]))
            u[j] = new
        if change <= 1e-15 * (1.0 + float(np.max(np.abs(u)))):
            break
    return u


def fit_l1_logistic(
    x: np.ndarray, p: np.ndarray, s: np.ndarray, c: float, *, tol: float = 1e-12, max_iter: int = 500
) -> np.ndarray:
    """The minimiser of `l1_objective` (proximal Newton with backtracking; deterministic)."""
    w = np.zeros(x.shape[1])
    obj = l1_objective(w, x, p, s, c)
    for _ in range(max_iter):
        q = _sigmoid(x @ w)
        grad = c * (x.T @ (s * (q - p)))
        hess = c * ((x.T * (s * q * (1.0 - q))) @ x)
        d = _lasso_quadratic(w, grad, hess) - w
        if float(np.max(np.abs(d))) <= tol:
            break
        decrease = float(grad @ d + np.sum(np.abs(w + d)) - np.sum(np.abs(w)))
        if decrease > -1e-15 * max(1.0, abs(obj)):  # nothing left to gain in float64
            break
        t = 1.0
        while True:
            cand = w + t * d
            cand_obj = l1_objective(cand, x, p, s, c)
            if cand_obj <= obj + 1e-4 * t * decrease or t < 1e-10:
                break
            t /= 2.0
        if cand_obj > obj:
            break
        w, obj = cand, cand_obj
    return w


def group_folds(m: int, n_splits: int = N_SPLITS) -> np.ndarray:
    """Fold of each of m one-row groups: sklearn's GroupKFold (groups in descending-size order,
    each to the lightest fold) with all sizes equal and a stable argsort: (m - 1 - g) mod k."""
    if m < n_splits:
        raise ValueError(f"cannot have {n_splits} folds with {m} rows")
    return (m - 1 - np.arange(m)) % n_splits


def weighted_logloss(p: np.ndarray, q: np.ndarray, s: np.ndarray) -> float:
    """alpaca_eval's `logloss` with continuous labels: -mean(s * (p log q + (1 - p) log(1 - q)))."""
    q = np.clip(q, LOGLOSS_EPS, 1.0 - LOGLOSS_EPS)
    return float(-np.mean(s * (p * np.log(q) + (1.0 - p) * np.log(1.0 - q))))


def select_c(x: np.ndarray, p: np.ndarray, s: np.ndarray) -> float:
    """The C of CS with the best summed cross-validated score (first on ties, like argmax)."""
    folds = group_folds(len(p))
    scores = np.zeros(len(CS))
    for f in range(N_SPLITS):
        test, train = folds == f, folds != f
        for k, c in enumerate(CS):
            w = fit_l1_logistic(x[train], p[train], s[train], float(c))
            scores[k] -= weighted_logloss(p[test], _sigmoid(x[test] @ w), s[test])
    return float(CS[int(np.argmax(scores))])


def model_std_delta_len(model_lengths: Sequence[int], reference_lengths: Sequence[int]) -> np.ndarray:
    """(len(reference) - len(model)) / its sample std; zeros when that std is 0 or undefined."""
    d = np.asarray(reference_lengths, dtype=float) - np.asarray(model_lengths, dtype=float)
    sd = float(np.std(d, ddof=1)) if len(d) > 1 else math.nan
    return np.zeros(len(d)) if not math.isfinite(sd) or sd == 0.0 else d / sd


def glm_winrate(
    preferences: Sequence[float | None],
    model_lengths: Sequence[int],
    reference_lengths: Sequence[int],
    table: GamedTable,
) -> GlmFit:
    """LC win rate of one model's items (item i = AlpacaEval instruction i; preference None =
    unreadable: out of the fit, in the prediction and in the length std)."""
    n = len(preferences)
    if not (len(model_lengths) == len(reference_lengths) == n) or n == 0:
        raise ValueError("preferences and lengths differ in number, or are empty")
    difficulty = table.difficulties(n)
    std_len = model_std_delta_len(model_lengths, reference_lengths)
    pref = np.array([math.nan if v is None else float(v) - 1.0 for v in preferences])
    x_model = np.column_stack([np.tanh(std_len), difficulty, np.ones(n)])
    x_gamed = np.column_stack(
        [np.tanh(table.std_delta_len), table.instruction_difficulty, table.not_gamed_baseline.astype(float)]
    )
    s_gamed = table.not_gamed_baseline.astype(float) + GAMED_WEIGHT * (~table.not_gamed_baseline)
    x = np.vstack([x_gamed, x_model])
    p = np.concatenate([table.preference, pref])
    s = np.concatenate([s_gamed, np.ones(n)])
    rated = ~np.isnan(p)
    x, p, s = x[rated], p[rated], s[rated]
    c = select_c(x, p, s)
    w = fit_l1_logistic(x, p, s, c)
    x_test = np.column_stack([np.zeros(n), difficulty, np.ones(n)])
    return GlmFit(
        length_controlled_winrate=100.0 * float(np.mean(_sigmoid(x_test @ w))),
        c=c,
        length_coef=float(w[0]),
        difficulty_coef=float(w[1]),
        not_gamed_coef=float(w[2]),
    )
