"""`a2rl data stage|verify` and `a2rl tasks list|score`: checksummed artifacts, disjoint splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from a2rl_cli import main
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import (
    MANIFEST,
    check_disjoint,
    fetch_artifact,
    heldout_leaks,
    stage_artifacts,
    store_prefix,
    verify_artifact,
)

from a2rl.errors import A2rlError
from a2rl.store.open import open_store
from tests.support.task_data import make_gsm8k_dir


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def gsm8k_src(tmp_path: Path) -> Path:
    return make_gsm8k_dir(tmp_path / "gsm8k-src", n_train=20, n_test=6, overlap=1)


@pytest.mark.parametrize("task", ["gsm8k", "humaneval", "arith"])
def test_staged_splits_are_disjoint_by_content(task: str, tmp_path: Path, gsm8k_src: Path) -> None:
    source = str(gsm8k_src) if task == "gsm8k" else None
    staged = stage_artifacts(get_task(task), source=source, root=tmp_path / "staged")
    assert heldout_leaks(staged.train_dir, staged.heldout_dir) == []
    for split in ("train", "heldout"):
        manifest = verify_artifact(staged.root / split)
        assert manifest.task == task and manifest.split == split
        assert len(manifest.digest or "") == 64


def test_leak_check_catches_a_copied_heldout_item(tmp_path: Path) -> None:
    staged = stage_artifacts(get_task("humaneval"), source=None, root=tmp_path / "staged")
    held = json.loads((staged.heldout_dir / "heldout.jsonl").read_text().splitlines()[5])
    # Renamed and reformatted: the check is by content, not by file name or id.
    (staged.train_dir / "extra.jsonl").write_text(
        json.dumps({"id": "harmless-name", "text": "  " + held["prompt"].replace("\n", "\n\n")}) + "\n"
    )
    assert heldout_leaks(staged.train_dir, staged.heldout_dir)
    with pytest.raises(A2rlError, match="held-out"):
        check_disjoint(staged.train_dir, staged.heldout_dir)


def test_stage_cli_writes_manifests_and_verify_detects_tampering(
    tmp_path: Path, gsm8k_src: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gsm8k"
    code, stdout, _ = _run(
        capsys, "data", "stage", "gsm8k", "--source", str(gsm8k_src), "--out", str(out), "--json"
    )
    assert code == 0
    summary = json.loads(stdout)
    assert summary["created"] is True and summary["train"]["files"] == 1
    manifest = json.loads((out / "heldout" / MANIFEST).read_text())
    import hashlib

    held_bytes = (out / "heldout" / "heldout.jsonl").read_bytes()
    assert manifest["files"]["heldout.jsonl"]["sha256"] == hashlib.sha256(held_bytes).hexdigest()
    assert manifest["source"] == str(gsm8k_src)

    code, stdout, _ = _run(capsys, "data", "verify", str(out))
    assert code == 0 and stdout.count("ok ") == 2
    # Staging again reuses the verified artifacts.
    code, stdout, _ = _run(capsys, "data", "stage", "gsm8k", "--source", str(gsm8k_src), "--out", str(out))
    assert code == 0 and "already staged" in stdout

    (out / "train" / "train.jsonl").write_text('{"id": "x", "question": "q", "answer": "#### 1"}\n')
    code, _, err = _run(capsys, "data", "verify", str(out))
    assert code == 2 and "changed train.jsonl" in err and err.count("\n") == 1


def test_stage_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "data", "stage", "gsm8k", "--out", str(tmp_path / "x"))
    assert code == 2 and "needs a data source" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "data", "stage", "nosuchtask", "--out", str(tmp_path / "y"))
    assert code == 2 and "unknown task" in err


def test_stage_to_store_and_fetch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = (tmp_path / "store").as_uri()
    code, stdout, _ = _run(capsys, "data", "stage", "humaneval", "--store", uri, "--json")
    assert code == 0
    keys = json.loads(stdout)["store"]
    assert keys["heldout"]["key"].endswith("data/humaneval/1-seed0/heldout")
    store = open_store(uri)
    dest = tmp_path / "fetched"
    manifest = fetch_artifact(store, f"{store_prefix(get_task('humaneval'), 0)}/heldout", dest)
    assert manifest.digest == keys["heldout"]["digest"]
    assert len((dest / "heldout.jsonl").read_text().splitlines()) == 82


def test_tasks_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "tasks", "list", "--json")
    assert code == 0
    rows = {r["task"]: r for r in json.loads(out)}
    assert {"gsm8k", "humaneval", "alpacaeval", "alfworld", "webshop", "deepsearchqa", "arith"} <= set(rows)
    assert rows["gsm8k"]["level"] == "L1" and rows["humaneval"]["metric"] == "pass@1 (%)"
    assert rows["alfworld"]["implemented"] is True and rows["alfworld"]["metric"] == "success rate (%)"
    code, out, _ = _run(capsys, "tasks", "list")
    assert code == 0 and out.splitlines()[0].split() == ["TASK", "LEVEL", "METRIC", "DATA"]


def test_tasks_describe(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "tasks", "describe", "gsm8k", "--protocol", "a2rl")
    assert code == 0 and "512 new tokens" in out
    code, out, _ = _run(capsys, "tasks", "describe", "gsm8k")  # reference: the reference's own text
    assert code == 0 and out.startswith("#GSM8K task\n")


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tasks_score_gsm8k_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = _jsonl(tmp_path / "refs.jsonl", [
        {"id": "1", "question": "q", "answer": "s\n#### 65,000"},
        {"id": "2", "question": "q", "answer": "s\n#### 3.5"},
        {"id": "3", "question": "q", "answer": "s\n#### 7"},
        {"id": "4", "question": "q", "answer": "s\n#### 7"},
    ])  # fmt: skip
    preds = _jsonl(tmp_path / "preds.jsonl", [
        {"id": "1", "prediction": "It is 65,000"},
        {"id": "2", "prediction": "The answer is 3.50\n\nQuestion: next one has 9"},
        {"id": "3", "prediction": "no idea"},
    ])  # fmt: skip
    details = tmp_path / "details.jsonl"
    args = ["--predictions", str(preds), "--references", str(refs), "--json", "--details", str(details)]
    code, out, _ = _run(capsys, "tasks", "score", "gsm8k", *args, "--protocol", "a2rl")
    assert code == 0
    res = json.loads(out)
    assert (res["n"], res["correct"], res["score"]) == (4, 2, 50.0)
    assert res["metrics"]["missing"] == 1 and res["protocol"] == "a2rl"
    assert len(details.read_text().splitlines()) == 4
    # The default, reference: OpenCompass reads "65,000" as "000", and "3.50" never equals "3.5"
    # (int("3.5") fails in Gsm8kEvaluator.is_equal).
    code, out, _ = _run(capsys, "tasks", "score", "gsm8k", *args)
    res = json.loads(out)
    assert (code, res["correct"], res["protocol"]) == (0, 0, "reference")


def test_tasks_score_humaneval_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from a2rl_tasks.humaneval import data

    probs = data.load_problems(data.builtin_path())[82:84]
    refs = _jsonl(tmp_path / "refs.jsonl", [{**data.heldout_row(p)} for p in probs])
    solution = probs[0]["prompt"] + probs[0]["canonical_solution"]
    preds = _jsonl(tmp_path / "preds.jsonl", [
        {"id": "HumanEval-82", "prediction": f"```python\n{solution}```"},
        {"id": "HumanEval-83", "prediction": "    while True:\n        pass\n"},
    ])  # fmt: skip
    code, out, _ = _run(
        capsys,
        "tasks",
        "score",
        "humaneval",
        "--predictions",
        str(preds),
        "--references",
        str(refs),
        "--json",
    )
    assert code == 0
    res = json.loads(out)
    assert (res["n"], res["correct"], res["score"]) == (2, 1, 50.0)


def test_tasks_score_rejects_unknown_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = _jsonl(tmp_path / "refs.jsonl", [{"id": "1", "question": "q", "answer": "#### 1"}])
    preds = _jsonl(tmp_path / "preds.jsonl", [{"id": "9", "prediction": "1"}])
    code, _, err = _run(
        capsys, "tasks", "score", "gsm8k", "--predictions", str(preds), "--references", str(refs)
    )
    assert code == 2 and "not in the references" in err
