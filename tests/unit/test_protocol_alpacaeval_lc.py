"""AlpacaEval 2.0's length-controlled win rate with the public `df_gamed.csv` table.

The oracle below is re-derived, independently of `a2rl_tasks.alpacaeval.glm`, from alpaca_eval
`src/alpaca_eval/metrics/glm_winrate.py` at tatsu-lab/alpaca_eval@1020da21d069684a5d21756c3d78873df4b7e8bc:
- `GLM_INFO["length_controlled_v1"]`: formula `np.tanh(std_delta_len) + instruction_difficulty +
  not_gamed_baseline.astype(float) - 1`, `regularize_to_baseline_lambda` 0.2, `n_splits` 5;
- `_get_featurized_data`: `std_delta_len = (len(output_1) - len(output_2)) / std` (pandas, ddof 1),
  preference - 1, difficulty `df_gamed.drop_duplicates("index")["instruction_difficulty"][g]`,
  gamed rows concatenated first with sample weight 0.2 / 2, the model's rows weight 1; the test
  design matrix has `std_delta_len` = 0;
- `get_length_controlled_winrate`: NaN preferences out of the fit, every item in the prediction,
  LC = 100 * mean(predict_proba);
- `fit_LogisticRegressionCV(is_ytrue_proba=True)`: each row duplicated (label 1 weighted p * s,
  label 0 weighted (1 - p) * s), `LogisticRegressionCV(penalty="l1", solver="liblinear",
  fit_intercept=False, cv=GroupKFold(5))` with Cs = logspace(-4, 4, 10), scored by
  `logloss_continuous` (clip 1e-15), best summed score refitted.
The oracle solves each L1 problem by enumerating sign patterns (a different algorithm from the
proximal Newton of the implementation) on the duplicated rows, and splits folds with sklearn's
GroupKFold loop written out (stable argsort).
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from a2rl_tasks.alpacaeval import glm
from a2rl_tasks.alpacaeval.task import AlpacaEvalTask, judge_outputs
from a2rl_tasks.artifacts import stage_artifacts
from a2rl_tasks.judge import Judge
from a2rl_tasks.judge.judge import JudgeReply

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest, InferenceBackend
from tests.support.judge_server import JudgeServer
from tests.support.task_data import eval_row, make_alpaca_dir

N_ITEMS = 50


# --- the oracle ----------------------------------------------------------------------------------


def _oracle_l1_fit(x: np.ndarray, y: np.ndarray, wt: np.ndarray, c: float) -> np.ndarray:
    """argmin |w|_1 + C sum_k wt_k log(1 + exp(-y_k x_k.w)), y in {-1, +1}: for every sign pattern
    minimise the smooth problem on its free coordinates by damped Newton and keep the pattern
    meeting the optimality conditions with the lowest objective."""

    def smooth(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        m = y * (x @ w)
        sig = np.exp(-np.logaddexp(0.0, m))  # 1 / (1 + e^m) = -d/dm log(1 + e^-m)
        f = c * float(np.sum(wt * np.logaddexp(0.0, -m)))
        g = -c * (x.T @ (wt * y * sig))
        h = c * ((x.T * (wt * sig * (1.0 - sig))) @ x)
        return f, g, h

    best: tuple[float, np.ndarray] | None = None
    for signs in itertools.product((-1, 0, 1), repeat=x.shape[1]):
        sv = np.array(signs, dtype=float)
        free = sv != 0
        w = np.zeros(x.shape[1])
        for _ in range(60):
            f, g, h = smooth(w)
            if not free.any():
                break
            gf = g[free] + sv[free]
            step = np.linalg.solve(h[np.ix_(free, free)] + 1e-14 * np.eye(int(free.sum())), gf)
            t = 1.0
            while t > 1e-12:
                cand = w.copy()
                cand[free] -= t * step
                if smooth(cand)[0] + sv @ cand <= f + sv @ w:
                    break
                t /= 2
            w = cand
            if np.max(np.abs(t * step)) < 1e-13 or t <= 1e-12:
                break
        _, g, _ = smooth(w)
        ok = all(np.sign(w[j]) == sv[j] or abs(w[j]) < 1e-12 for j in np.flatnonzero(free))
        ok = ok and all(abs(g[j] + sv[j]) <= 1e-7 * (1 + c) for j in np.flatnonzero(free))  # stationary
        ok = ok and all(abs(g[j]) <= 1.0 + 1e-7 for j in np.flatnonzero(~free))
        obj = smooth(w)[0] + float(np.sum(np.abs(w)))
        if ok and (best is None or obj < best[0] - 1e-12):
            best = (obj, w)
    assert best is not None
    return best[1]


def _oracle_group_kfold(groups: np.ndarray, n_splits: int = 5) -> list[np.ndarray]:
    unique_groups, groups_inv = np.unique(groups, return_inverse=True)
    n_samples_per_group = np.bincount(groups_inv)
    indices = np.argsort(n_samples_per_group, kind="stable")[::-1]
    n_samples_per_group = n_samples_per_group[indices]
    n_samples_per_fold = np.zeros(n_splits)
    group_to_fold = np.zeros(len(unique_groups))
    for group_index, weight in enumerate(n_samples_per_group):
        lightest = np.argmin(n_samples_per_fold)
        n_samples_per_fold[lightest] += weight
        group_to_fold[indices[group_index]] = lightest
    fold_of = group_to_fold[groups_inv]
    return [np.flatnonzero(fold_of == f) for f in range(n_splits)]


def _proba(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(x @ w)))


def oracle_lc(
    preferences: Sequence[float | None],
    model_lengths: Sequence[int],
    reference_lengths: Sequence[int],
    gamed_rows: list[dict[str, Any]],
) -> tuple[float, np.ndarray]:
    # _get_featurized_data
    first_of_index: dict[int, int] = {}
    for label, row in enumerate(gamed_rows):
        first_of_index.setdefault(row["index"], label)
    difficulty_series = {
        label: gamed_rows[label]["instruction_difficulty"] for label in first_of_index.values()
    }
    delta = np.array(reference_lengths, float) - np.array(model_lengths, float)  # len_1 - len_2
    std_delta_len = delta / np.std(delta, ddof=1)
    n = len(preferences)
    model = [
        {"preference": None if p is None else p - 1.0, "std_delta_len": std_delta_len[g],
         "instruction_difficulty": difficulty_series[g], "not_gamed_baseline": True}
        for g, p in enumerate(preferences)
    ]  # fmt: skip
    rows = [dict(r) for r in gamed_rows] + model
    weights = [1.0 if r["not_gamed_baseline"] else 0.2 / 2 for r in rows]
    keep = [k for k, r in enumerate(rows) if r["preference"] is not None]
    x = np.array(
        [[np.tanh(rows[k]["std_delta_len"]), rows[k]["instruction_difficulty"],
          float(rows[k]["not_gamed_baseline"])] for k in keep]
    )  # fmt: skip
    p = np.array([rows[k]["preference"] for k in keep])
    s = np.array([weights[k] for k in keep])
    # fit_LogisticRegressionCV: duplicate, label 1 weighted p*s and label 0 weighted (1-p)*s
    m = len(keep)
    x_dup = np.vstack([x, x])
    y_dup = np.concatenate([np.ones(m), -np.ones(m)])
    wt_dup = np.concatenate([p * s, (1 - p) * s])
    true_prob = np.concatenate([p, 1 - p])
    true_weight = np.concatenate([s, s])
    group = np.concatenate([np.arange(m), np.arange(m)])
    cs = np.logspace(-4, 4, 10)
    scores = np.zeros(len(cs))
    for test in _oracle_group_kfold(group):
        train = np.setdiff1d(np.arange(2 * m), test)
        for k, c in enumerate(cs):
            w = _oracle_l1_fit(x_dup[train], y_dup[train], wt_dup[train], c)
            y_true = np.where(y_dup[test] == 1, true_prob[test], 1 - true_prob[test])
            q = np.clip(_proba(x_dup[test], w), 1e-15, 1 - 1e-15)
            loss = -np.mean(true_weight[test] * (y_true * np.log(q) + (1 - y_true) * np.log(1 - q)))
            scores[k] += -loss
    w = _oracle_l1_fit(x_dup, y_dup, wt_dup, cs[int(np.argmax(scores))])
    x_test = np.array([[0.0, difficulty_series[g], 1.0] for g in range(n)])
    return 100 * float(np.mean(_proba(x_test, w))), w


# --- constructed annotations ---------------------------------------------------------------------


def _difficulty(g: int) -> float:
    return round(np.sin(1.7 * g) * 1.3, 6)


def gamed_rows(n: int = N_ITEMS) -> list[dict[str, Any]]:
    """Two gamed baselines (verbose: longer, preferred more; concise: shorter), instructions 0..n-1
    each, one unreadable annotation (empty preference)."""
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(7)
    for verbose in (True, False):
        for g in range(n):
            d = (-1.0 if verbose else 1.0) * abs(rng.normal(1.0, 0.6))
            z = -0.9 * np.tanh(d) + 1.1 * _difficulty(g)
            pref = round(float(1 / (1 + np.exp(-z))), 4)
            rows.append({"model": "verbose" if verbose else "concise", "index": g, "preference": pref,
                         "std_delta_len": round(d, 6), "instruction_difficulty": _difficulty(g),
                         "not_gamed_baseline": False})  # fmt: skip
    rows[3]["preference"] = None
    return rows


def write_gamed(path: Path, rows: list[dict[str, Any]]) -> Path:
    cols = ["model", "index", "preference", "std_delta_len", "instruction_difficulty", "not_gamed_baseline"]
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(cols)
        for r in rows:
            out.writerow(["" if r[c] is None else r[c] for c in cols])
    return path


def model_annotations(n: int = N_ITEMS) -> tuple[list[float | None], list[int], list[int]]:
    """A length-biased judge: longer outputs win more often; two unreadable annotations."""
    rng = np.random.default_rng(3)
    ref_len = [int(v) for v in rng.integers(200, 1500, n)]
    model_len = [max(1, r + int(v)) for r, v in zip(ref_len, rng.normal(300, 500, n), strict=True)]
    prefs: list[float | None] = []
    for g in range(n):
        z = 1.5 * np.tanh((model_len[g] - ref_len[g]) / 500) + 0.8 * _difficulty(g) - 0.3
        u = rng.random()
        prefs.append(
            2.0 if u < 1 / (1 + np.exp(-z)) - 0.08 else 1.5 if u < 1 / (1 + np.exp(-z)) + 0.08 else 1.0
        )
    prefs[5] = prefs[17] = None
    return prefs, model_len, ref_len


def test_lc_winrate_equals_the_alpaca_eval_derivation(tmp_path: Path) -> None:
    rows = gamed_rows()
    table = glm.read_gamed_table(write_gamed(tmp_path / glm.GAMED_FILE, rows))
    prefs, model_len, ref_len = model_annotations()
    fit = glm.glm_winrate(prefs, model_len, ref_len, table)
    expected, w = oracle_lc(prefs, model_len, ref_len, rows)
    assert fit.length_controlled_winrate == pytest.approx(expected, abs=1e-6)
    assert [fit.length_coef, fit.difficulty_coef, fit.not_gamed_coef] == pytest.approx(list(w), abs=1e-6)
    # The length bias is real and corrected: a positive weight on (reference - model) length means
    # a negative one on the model's extra length, and LC is below the raw win rate.
    rated = [p - 1 for p in prefs if p is not None]
    assert fit.length_coef < 0 and fit.length_controlled_winrate < 100 * float(np.mean(rated)) - 3
    assert fit.c in glm.CS


def test_every_penalty_strength_solves_the_same_problem_as_the_oracle() -> None:
    rng = np.random.default_rng(11)
    x = np.column_stack([np.tanh(rng.normal(size=60)), rng.normal(size=60), np.ones(60)])
    p = rng.uniform(0, 1, 60)
    s = np.where(np.arange(60) < 40, 0.1, 1.0)
    x_dup, y_dup = np.vstack([x, x]), np.concatenate([np.ones(60), -np.ones(60)])
    for c in glm.CS:
        ours = glm.fit_l1_logistic(x, p, s, float(c))
        oracle = _oracle_l1_fit(x_dup, y_dup, np.concatenate([p * s, (1 - p) * s]), float(c))
        assert ours == pytest.approx(oracle, abs=1e-7)
    assert not glm.fit_l1_logistic(x, p, s, 1e-4).any()  # strong L1: every weight is zero


def test_folds_are_sklearn_group_kfold_with_one_row_groups() -> None:
    for m in (5, 12, 203):
        ours = glm.group_folds(m)
        oracle = _oracle_group_kfold(np.arange(m))
        assert [list(np.flatnonzero(ours == f)) for f in range(5)] == [list(t) for t in oracle]


def test_difficulty_lookup_and_table_errors(tmp_path: Path) -> None:
    rows = gamed_rows(6)
    table = glm.read_gamed_table(write_gamed(tmp_path / "a.csv", rows))
    assert list(table.difficulties(6)) == pytest.approx([_difficulty(g) for g in range(6)])
    with pytest.raises(A2rlError, match="no instruction difficulty"):
        table.difficulties(7)
    bad = tmp_path / "b.csv"
    bad.write_text("index,preference\n0,0.5\n")
    with pytest.raises(A2rlError, match="missing column"):
        glm.read_gamed_table(bad)
    rows[0]["preference"] = 1.5
    with pytest.raises(A2rlError, match=r"\[0, 1\]"):
        glm.read_gamed_table(write_gamed(tmp_path / "c.csv", rows))


# --- the task: with and without the staged table ---------------------------------------------------


class _ScriptedJudge:
    """Replies with the reference annotator's ranking JSON: the model first iff `wins[instruction]`."""

    def __init__(self, wins: dict[str, bool]) -> None:
        self.wins = wins

    def ask_many(self, requests: list[list[dict[str, str]]], max_tokens: int = 0) -> list[JudgeReply]:
        from a2rl_tasks.alpacaeval.reference_judge import is_switched

        del max_tokens
        out = []
        for messages in requests:
            instr = next(k for k in self.wins if k in messages[-1]["content"])
            m_first = self.wins[instr] == is_switched(instr)  # "m" is the model iff switched
            order = ["m", "M"] if m_first else ["M", "m"]
            ranks = [{"model": name, "rank": k + 1} for k, name in enumerate(order)]
            out.append(JudgeReply(json.dumps({"ordered_models": ranks}), cached=False))
        return out

    def stats(self) -> dict[str, float]:
        return {}


def test_judged_result_uses_the_glm_only_with_the_table(tmp_path: Path) -> None:
    rows = gamed_rows(30)
    table = glm.read_gamed_table(write_gamed(tmp_path / glm.GAMED_FILE, rows))
    items = [{"id": f"alpacaeval-{i + 1:05d}", **eval_row(i)} for i in range(30)]
    outputs = ["v" * (len(it["output"]) + (15 * i if i % 3 else -40)) for i, it in enumerate(items)]
    wins = {it["instruction"]: i % 3 != 0 or i % 5 == 0 for i, it in enumerate(items)}  # longer wins, mostly
    judge = cast(Judge, _ScriptedJudge(wins))
    plain = judge_outputs(judge, items, outputs, "alpacaeval-2+reference", "reference")
    exact = judge_outputs(judge, items, outputs, "alpacaeval-2+reference", "reference", gamed=table)
    assert plain.evaluator_version == "alpacaeval-2+reference" and plain.metrics["lc_glm"] == 0.0
    assert exact.evaluator_version == "alpacaeval-2+reference+lc-glm" and exact.metrics["lc_glm"] == 1.0
    assert "lc_intercept" in plain.metrics and "lc_intercept" not in exact.metrics
    prefs = [d["preference"] for d in exact.details]
    expected, _ = oracle_lc(prefs, [len(o) for o in outputs], [len(it["output"]) for it in items], rows)
    assert exact.score == pytest.approx(expected, abs=1e-6) and exact.score != plain.score
    assert exact.metrics["win_rate"] == plain.metrics["win_rate"]  # only the LC rate changes
    assert exact.metrics["lc_c"] > 1e-4 and exact.metrics["lc_length_coef"] < 0  # a real fit


def test_staging_copies_the_table_into_the_heldout_dir(tmp_path: Path) -> None:
    src = make_alpaca_dir(tmp_path / "src", n_eval=6)
    write_gamed(src / glm.GAMED_FILE, gamed_rows(6))
    staged = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "staged")
    assert (staged.heldout_dir / glm.GAMED_FILE).read_bytes() == (src / glm.GAMED_FILE).read_bytes()
    assert not (staged.train_dir / glm.GAMED_FILE).exists()
    # Without the table nothing is staged; a table not covering the evaluation set is an error.
    bare = make_alpaca_dir(tmp_path / "bare", n_eval=6)
    staged_bare = stage_artifacts(AlpacaEvalTask(), source=str(bare), root=tmp_path / "staged-bare")
    assert not (staged_bare.heldout_dir / glm.GAMED_FILE).exists()
    short = make_alpaca_dir(tmp_path / "short", n_eval=6)
    write_gamed(short / glm.GAMED_FILE, gamed_rows(4))
    with pytest.raises(A2rlError, match="no instruction difficulty"):
        stage_artifacts(AlpacaEvalTask(), source=str(short), root=tmp_path / "staged-short")


class _LengthBackend(InferenceBackend):
    name = "lengths"

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        del request
        return ["w" * (60 + 47 * (k % 7)) for k in range(len(prompts))]


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    with JudgeServer() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("A2RL_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
        yield server


def test_evaluate_reads_the_staged_table(judge: JudgeServer, tmp_path: Path) -> None:
    del judge
    src = make_alpaca_dir(tmp_path / "src", n_eval=30)
    plain_dir = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "plain").heldout_dir
    write_gamed(src / glm.GAMED_FILE, gamed_rows(30))
    glm_dir = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "glm").heldout_dir
    task = AlpacaEvalTask()
    plain = task.evaluate(_LengthBackend(), plain_dir)
    exact = task.evaluate(_LengthBackend(), glm_dir)
    assert plain.metrics["lc_glm"] == 0.0 and exact.metrics["lc_glm"] == 1.0
    assert exact.evaluator_version == plain.evaluator_version + "+lc-glm"
    assert task.evaluator_version == plain.evaluator_version
    prefs = [d["preference"] for d in exact.details]
    lengths = [d["length"] for d in exact.details], [d["reference_length"] for d in exact.details]
    expected, _ = oracle_lc(prefs, *lengths, gamed_rows(30))
    assert exact.score == pytest.approx(expected, abs=1e-6)
    assert exact.metrics["lc_c"] > 1e-4 and exact.metrics["lc_length_coef"] != 0.0
