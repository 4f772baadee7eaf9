"""alpacaeval: staging (disjoint by content), prompts, win rates with length control, judged scoring."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from a2rl_cli import main
from a2rl_tasks import get_task
from a2rl_tasks.alpacaeval import data
from a2rl_tasks.alpacaeval.prompting import (
    is_swapped,
    judge_messages,
    parse_label,
    preference_from_reply,
)
from a2rl_tasks.alpacaeval.task import AlpacaEvalTask, build_prompts
from a2rl_tasks.alpacaeval.winrate import fit_length_glm, length_feature, win_rates
from a2rl_tasks.artifacts import heldout_leaks, stage_artifacts
from a2rl_tasks.judge import JudgeConfigError

from a2rl.errors import A2rlError
from a2rl.inference import GenerationRequest, InferenceBackend
from tests.support.judge_server import JudgeServer
from tests.support.task_data import eval_row, make_alpaca_dir, train_row


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# --- staging ---------------------------------------------------------------------------------


def test_stage_drops_training_rows_that_repeat_heldout_text(tmp_path: Path) -> None:
    src = make_alpaca_dir(tmp_path / "src", n_train=12, n_eval=6, overlap=2)
    staged = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "staged")
    train = _jsonl(staged.train_dir / "train.jsonl")
    heldout = _jsonl(staged.heldout_dir / "heldout.jsonl")
    assert len(heldout) == 6 and len(train) == 12 - 3
    assert heldout[0] == {"id": "alpacaeval-00001", **eval_row(0)}
    held_instr = {h["instruction"] for h in heldout}
    assert not any(t["instruction"] in held_instr for t in train)
    assert heldout_leaks(staged.train_dir, staged.heldout_dir) == []
    with_input = next(t for t in train if t["input"])
    assert with_input["question"] == with_input["instruction"] + "\n\n" + with_input["input"]
    assert with_input["answer"] == with_input["output"]
    assert [t["id"] for t in train] == [f"alpacaeval-train-{i:05d}" for i in range(1, 10)]
    # Nothing of the held-out split in any agent-visible file, by content.
    train_text = " ".join((staged.train_dir / f).read_text() for f in ("train.jsonl", "manifest.json"))
    assert not any(h["output"] in train_text or h["instruction"] in train_text for h in heldout)


def test_training_set_is_capped_after_filtering() -> None:
    train = [train_row(i) for i in range(10)]
    train[0] = {"instruction": eval_row(0)["instruction"], "input": "", "output": "x"}
    visible, heldout = data.split(train, [eval_row(0)], train_size=4)
    assert [v["instruction"] for v in visible] == [train_row(i)["instruction"] for i in (1, 2, 3, 4)]
    assert len(heldout) == 1


def test_file_pair_and_jsonl_sources(tmp_path: Path) -> None:
    make_alpaca_dir(tmp_path, overlap=0)
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join(json.dumps(eval_row(i)) + "\n" for i in range(3)))
    train, ev = data.load_source(f"{tmp_path / data.TRAIN_FILE},{evals}")
    assert len(train) == 12 and len(ev) == 3 and ev[2]["instruction"] == eval_row(2)["instruction"]


def test_source_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(A2rlError, match="needs a data source"):
        data.load_source(None)
    with pytest.raises(A2rlError, match="not found"):
        data.load_source(str(tmp_path / "missing"))
    (tmp_path / "d").mkdir()
    with pytest.raises(A2rlError, match="no training file"):
        data.load_source(str(tmp_path / "d"))
    src = make_alpaca_dir(tmp_path / "bad")
    (src / data.EVAL_FILE).write_text(json.dumps([{"instruction": "x"}]))
    with pytest.raises(A2rlError, match='row 1 needs a string field "output"'):
        data.load_source(str(src))


# --- prompts ---------------------------------------------------------------------------------


class ChatBackend(InferenceBackend):
    """A backend offering the `render_chat` hook (what a chat-template model looks like)."""

    name = "scripted"

    def __init__(self, outputs: dict[str, str] | None = None, chat: bool = True) -> None:
        self.outputs = outputs or {}
        self.chat = chat
        self.prompts: list[str] = []

    def render_chat(self, messages: list[dict[str, str]]) -> str | None:
        if not self.chat:
            return None
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"

    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        assert request.max_new_tokens == 512 and not request.stop and not request.chat
        self.prompts.extend(prompts)
        return [self.outputs.get(p, "  ") for p in prompts]


def test_generation_prompt_is_chat_template_or_raw_instruction() -> None:
    assert build_prompts(ChatBackend(), ["Hi there"]) == (["<user>Hi there</user><assistant>"], "chat")
    assert build_prompts(ChatBackend(chat=False), ["Hi there"]) == (["Hi there"], "plain")


def test_judge_prompt_positions_are_deterministic_and_balanced() -> None:
    instructions = [eval_row(i)["instruction"] for i in range(200)]
    swapped = [is_swapped(i) for i in instructions]
    assert 70 < sum(swapped) < 130
    for instr in instructions[:8]:
        msgs = judge_messages(instr, "MODEL OUT", "REF OUT")
        user = msgs[1]["content"]
        first = "MODEL OUT" if is_swapped(instr) else "REF OUT"
        second = "REF OUT" if first == "MODEL OUT" else "MODEL OUT"
        assert f"# Response m\n<<<\n{first}\n>>>" in user and f"# Response M\n<<<\n{second}\n>>>" in user
        assert instr in user and msgs[0]["role"] == "system"
        model_label = "m" if is_swapped(instr) else "M"
        other = "M" if model_label == "m" else "m"
        assert preference_from_reply(model_label, instr) == 2.0
        assert preference_from_reply(other, instr) == 1.0


@pytest.mark.parametrize(
    ("reply", "label"),
    [("M", "M"), (" m\n", "m"), ("`M`", "M"), ("**m**", "m"), ("Response M is better.", "M"),
     ("Output (m)", "m"), ("m or M", None), ("", None), ("Both are fine", None), ("Mm", None)],
)  # fmt: skip
def test_parse_label(reply: str, label: str | None) -> None:
    assert parse_label(reply) == label


# --- win rates -------------------------------------------------------------------------------


def test_glm_fit_is_the_penalised_optimum() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=300)
    p = rng.uniform(size=300)
    theta, phi = fit_length_glm(p, list(x), c=100.0)
    s = 1 / (1 + np.exp(-(theta + phi * x)))
    grad = np.array([np.sum(s - p) + theta / 100.0, np.sum((s - p) * x) + phi / 100.0])
    assert np.max(np.abs(grad)) < 1e-6


def test_length_control_recovers_the_length_free_preference() -> None:
    """A judge whose preference depends on quality (intercept 0.4) and strongly on length."""
    rng = np.random.default_rng(7)
    n = 20000  # the estimate's sd is ~0.6 points at this size
    ref = rng.integers(200, 1200, n)
    model = ref + rng.integers(-150, 600, n)  # the model is mostly longer
    f = np.array(length_feature(list(model), list(ref)))
    prob = 1 / (1 + np.exp(-(0.4 + 2.5 * f)))
    prefs = [2.0 if u < q else 1.0 for u, q in zip(rng.uniform(size=n), prob, strict=True)]
    rates = win_rates(prefs, list(model), list(ref))
    truth = 100 / (1 + math.exp(-0.4))  # 59.87
    assert abs(rates.length_controlled_winrate - truth) < 2.0
    assert rates.win_rate > truth + 10  # the raw rate is inflated by length
    assert rates.lc_length_coef == pytest.approx(2.5, abs=0.2)


def test_win_rate_bookkeeping() -> None:
    r = win_rates([2.0, 1.0, 1.5, 2.0], [10, 10, 10, 10], [10, 10, 10, 10])
    assert (r.n_wins, r.n_wins_base, r.n_draws, r.n_total) == (2, 1, 1, 4)
    assert r.win_rate == pytest.approx(62.5) and r.discrete_win_rate == pytest.approx(62.5)
    # No length variation: the length feature is zero and LC is the (lightly penalised) raw rate.
    assert r.lc_length_coef == 0.0 and r.length_controlled_winrate == pytest.approx(62.5, abs=0.5)
    assert r.standard_error == pytest.approx(100 * np.std([1, 0, 0.5, 1], ddof=1) / 2)
    with pytest.raises(ValueError):
        win_rates([], [], [])
    with pytest.raises(ValueError):
        win_rates([3.0], [1], [1])


# --- judged scoring --------------------------------------------------------------------------


@pytest.fixture
def judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    with JudgeServer() as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("A2RL_JUDGE_CACHE_DIR", str(tmp_path / "judge-cache"))
        yield server


def _references(n: int = 6) -> list[dict[str, Any]]:
    return [{"id": f"alpacaeval-{i + 1:05d}", **eval_row(i)} for i in range(n)]


def test_score_predictions_with_the_loopback_judge(judge: JudgeServer) -> None:
    refs = _references(6)
    preds = {
        refs[0]["id"]: "x" * 2000,  # longer: wins with this judge
        refs[1]["id"]: "short",  # loses
        refs[2]["id"]: refs[2]["output"],  # identical to the reference: a draw, not asked
        refs[3]["id"]: "y" * 3000,  # wins
        refs[4]["id"]: "tiny",  # loses
        # refs[5] missing: an empty output, judged (and loses)
    }
    task = get_task("alpacaeval", protocol="a2rl")  # our prompt (test_protocol_alpacaeval: the reference's)
    assert task.evaluator_version == "alpacaeval-2+a2rl+judge-loopback-judge"
    result = task.score_predictions(preds, refs)
    assert judge.requests == 5
    by_id = {d["id"]: d for d in result.details}
    assert [by_id[r["id"]]["preference"] for r in refs] == [2.0, 1.0, 1.5, 2.0, 1.0, 1.0]
    assert by_id[refs[2]["id"]]["judge_reply"] is None
    assert (result.n, result.correct) == (6, 2)
    assert result.metrics["win_rate"] == pytest.approx(100 * 2.5 / 6)
    assert result.metrics["judge_requests"] == 5.0 and result.metrics["judge_unparsed"] == 0.0
    assert 0.0 <= result.score <= 100.0 and result.score == result.metrics["length_controlled_winrate"]
    assert all(d["judge_parsed"] for d in result.details)
    # The judge saw the model's output first exactly on the swapped items.
    assert is_swapped(refs[0]["instruction"]) and not is_swapped(refs[4]["instruction"])
    for ref in (refs[0], refs[4]):
        body = next(b for b in judge.bodies if ref["instruction"] in b["messages"][1]["content"])
        shown_first = body["messages"][1]["content"].split("# Response m\n<<<\n", 1)[1]
        assert shown_first.startswith(preds[ref["id"]]) == is_swapped(ref["instruction"])
        assert by_id[ref["id"]]["swapped"] == is_swapped(ref["instruction"])

    # Re-scoring the same outputs costs nothing and gives the same result.
    again = get_task("alpacaeval", protocol="a2rl").score_predictions(preds, refs)
    assert judge.requests == 5
    assert again.score == result.score and again.metrics["judge_cache_hits"] == 5.0
    assert all(d["judge_cached"] in (True, None) for d in again.details)


def test_length_alone_does_not_win(judge: JudgeServer) -> None:
    """Against a purely length-biased judge, outputs that win only by being longer score far
    lower length-controlled than raw."""
    refs = _references(16)
    preds = {}
    for i, r in enumerate(refs):
        extra = 40 * (i + 1) if i % 4 else -30  # 12 of 16 longer than the reference
        preds[r["id"]] = "w" * max(1, len(r["output"]) + extra)
    result = get_task("alpacaeval").score_predictions(preds, refs)
    assert result.metrics["win_rate"] == pytest.approx(75.0)
    assert result.score < result.metrics["win_rate"] - 5


class CountingBackend(ChatBackend):
    def generate(self, prompts: Sequence[str], request: GenerationRequest) -> list[str]:
        raise AssertionError("generation must not start without a judge")


def test_missing_judge_is_an_error_before_generation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in ("A2RL_JUDGE_BASE_URL", "A2RL_JUDGE_MODEL", "A2RL_JUDGE_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    src = make_alpaca_dir(tmp_path / "src")
    staged = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "staged")
    task = AlpacaEvalTask()
    assert task.evaluator_version == "alpacaeval-2+reference"
    with pytest.raises(JudgeConfigError, match="A2RL_JUDGE_BASE_URL"):
        task.evaluate(CountingBackend(), staged.heldout_dir)
    with pytest.raises(JudgeConfigError):
        task.score_predictions({}, _references(1))


def test_evaluate_generates_then_judges(judge: JudgeServer, tmp_path: Path) -> None:
    src = make_alpaca_dir(tmp_path / "src", n_eval=4)
    staged = stage_artifacts(AlpacaEvalTask(), source=str(src), root=tmp_path / "staged")
    backend = ChatBackend({f"<user>{eval_row(0)['instruction']}</user><assistant>": "  " + "z" * 900 + "\n"})
    result = AlpacaEvalTask().evaluate(backend, staged.heldout_dir, limit=3)
    assert len(backend.prompts) == 3 and result.n == 3
    d0 = result.details[0]
    assert d0["mode"] == "chat" and d0["output"] == "z" * 900 and d0["preference"] == 2.0
    assert [d["preference"] for d in result.details[1:]] == [1.0, 1.0]  # empty outputs lose
    assert result.correct == 1 and judge.requests == 3


def test_tasks_score_cli(judge: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = _references(3)
    ref_file = tmp_path / "refs.jsonl"
    ref_file.write_text("".join(json.dumps(r) + "\n" for r in refs))
    pred_file = tmp_path / "preds.jsonl"
    pred_file.write_text(json.dumps({"id": refs[0]["id"], "prediction": "q" * 5000}) + "\n")
    code = main(["tasks", "score", "alpacaeval", "--predictions", str(pred_file),
                 "--references", str(ref_file), "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "alpacaeval" and out["n"] == 3 and out["correct"] == 1
    assert out["metrics"]["missing"] == 2.0 and out["metrics"]["win_rate"] == pytest.approx(100 / 3, abs=1e-3)
    assert out["evaluator_version"] == "alpacaeval-2+reference+judge-loopback-judge"


def test_tasks_score_cli_without_judge_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("A2RL_JUDGE_BASE_URL", raising=False)
    monkeypatch.delenv("A2RL_JUDGE_MODEL", raising=False)
    ref_file = tmp_path / "refs.jsonl"
    ref_file.write_text(json.dumps(_references(1)[0]) + "\n")
    pred_file = tmp_path / "preds.jsonl"
    pred_file.write_text("")
    assert main(["tasks", "score", "alpacaeval", "--predictions", str(pred_file),
                 "--references", str(ref_file)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.startswith("a2rl: error: task alpacaeval is scored by an LLM judge") and err.count("\n") == 1
