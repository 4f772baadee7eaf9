"""`a2rl tasks list|describe|score` and `a2rl data stage|verify` for every registered task:
what users see, and one-line errors (exit 2, no traceback) for bad input."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main
from a2rl_tasks import TASKS, get_task
from a2rl_tasks.artifacts import MANIFEST, fetch_artifact, store_prefix, verify_artifact

from a2rl.constants import ENV_CACHE_DIR, ENV_JUDGE_CACHE_DIR
from a2rl.store.open import open_store
from tests.support.task_sources import source_for

PAPER = ["gsm8k", "humaneval", "alpacaeval", "alfworld", "webshop", "deepsearchqa"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.startswith("a2rl: error: ") and err.count("\n") == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_tasks_list_shows_the_six_tasks_then_the_cpu_tasks(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "tasks", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    names = [r["task"] for r in rows]
    assert names[:6] == PAPER and "arith" in names[6:]
    by = {r["task"]: r for r in rows}
    assert [by[t]["level"] for t in PAPER] == ["L1", "L1", "L2", "L3", "L3", "L3"]
    assert by["arith"]["level"] == "cpu"
    assert by["webshop"]["metric"] == "success rate (%)" and by["gsm8k"]["metric"] == "accuracy (%)"
    for name in TASKS:
        assert by[name]["implemented"] is True and by[name]["metric"] == get_task(name).metric
    assert by["gsm8k"]["data"] == "not staged (needs: a2rl data stage gsm8k --source …)"
    assert by["webshop"]["data"] == "not staged (staged on first run)"
    assert by["webshop"]["offline_scoring"] is True and by["arith"]["offline_scoring"] is False

    code, out, _ = run(capsys, "tasks", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["TASK", "LEVEL", "METRIC", "DATA"]
    assert [line.split()[0] for line in lines[1:]] == names


def test_data_status_follows_staging(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "data", "stage", "webshop", "--json")
    assert code == 0 and json.loads(out)["created"] is True
    assert Path(json.loads(out)["train"]["path"]).is_relative_to(cache)
    _, out, _ = run(capsys, "tasks", "list", "--json")
    assert {r["task"]: r for r in json.loads(out)}["webshop"]["data"] == "staged (checksummed)"
    code, out, _ = run(capsys, "data", "stage", "webshop")
    assert code == 0 and "already staged and verified" in out


@pytest.fixture(scope="module", params=sorted(TASKS))
def staged_out(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Every registered task staged through the CLI into --out, with its small test source."""
    name: str = request.param
    root = tmp_path_factory.mktemp(f"cli-{name}")
    source = source_for(name).build(root / "src")
    argv = ["data", "stage", name, "--out", str(root / "out"), "--json"]
    if source is not None:
        argv += ["--source", source]
    assert main(argv) == 0
    yield name, root / "out", source


def test_stage_writes_two_checksummed_artifacts(staged_out: Any, capsys: pytest.CaptureFixture[str]) -> None:
    name, out, source = staged_out
    capsys.readouterr()
    for split in ("train", "heldout"):
        manifest = verify_artifact(out / split)
        assert manifest.task == name and manifest.split == split and manifest.source == source
        assert manifest.files and len(manifest.digest or "") == 64
    code, stdout, _ = run(capsys, "data", "verify", str(out))
    assert code == 0 and stdout.count("ok ") == 2


def _references(heldout: Path) -> Path:
    files = sorted(heldout.glob("*.jsonl"))
    assert len(files) == 1, f"expected one held-out JSONL file in {heldout}, got {files}"
    return files[0]


def test_tasks_score_on_staged_references(
    staged_out: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task that scores offline scores its own held-out format (all predictions empty but
    one); the others say so in one line."""
    name, out, _ = staged_out
    capsys.readouterr()
    refs = _references(out / "heldout")
    ids = [json.loads(line)["id"] for line in refs.read_text().splitlines() if line.strip()]
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"id": ids[0], "prediction": "I do not know."}) + "\n")
    argv = ["tasks", "score", name, "--predictions", str(preds), "--references", str(refs), "--json",
            "--details", str(tmp_path / "details.jsonl")]  # fmt: skip
    task = get_task(name)
    if not (hasattr(task, "score_predictions") or hasattr(task, "score_prediction_files")):
        code, _, err = run(capsys, *argv)
        assert_one_line_error(code, err, "does not support offline scoring")
        return
    judge = None
    if name in ("alpacaeval", "deepsearchqa"):  # LLM-judged: a deterministic judge on loopback
        from tests.support.judge_server import JudgeServer

        judge = JudgeServer()
        judge.__enter__()
        for key, value in judge.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv(ENV_JUDGE_CACHE_DIR, str(tmp_path / "judge-cache"))
    try:
        code, stdout, err = run(capsys, *argv)
    finally:
        if judge is not None:
            judge.__exit__(None, None, None)
    assert code == 0, err
    res = json.loads(stdout)
    assert res["task"] == name and res["n"] == len(ids) and 0.0 <= res["score"] <= 100.0
    assert res["metrics"]["missing"] == len(ids) - 1
    assert res["evaluator_version"].startswith(task.evaluator_version)
    assert len((tmp_path / "details.jsonl").read_text().splitlines()) == len(ids)


def test_stage_to_store_and_fetch_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = (tmp_path / "store").as_uri()
    code, out, _ = run(capsys, "data", "stage", "webshop", "--store", uri, "--json")
    assert code == 0
    keys = json.loads(out)["store"]
    version = get_task("webshop").data_version  # "<data version>+<protocol>": data per protocol
    assert (
        keys["heldout"]["key"].endswith(f"data/webshop/{version}-seed0/heldout") and "+reference" in version
    )
    prefix = store_prefix(get_task("webshop"), 0)
    manifest = fetch_artifact(open_store(uri), f"{prefix}/heldout", tmp_path / "fetched")
    assert manifest.digest == keys["heldout"]["digest"]
    assert (tmp_path / "fetched" / "env.json").is_file() and (tmp_path / "fetched" / MANIFEST).is_file()


def test_stage_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [
        (["data", "stage", "nosuchtask"], ["unknown task", "webshop"]),
        (["data", "stage", "gsm8k", "--out", str(tmp_path / "g")], ["needs a data source"]),
        (["data", "stage", "webshop", "--source", str(tmp_path / "missing"), "--out", str(tmp_path / "w")],
         ["webshop source not found"]),
        (["data", "stage", "webshop", "--out", str(a_file)], ["not a staged data directory"]),
        (["data", "stage", "webshop", "--out", str(a_file / "sub")], ["staging webshop failed"]),
        (["data", "stage", "webshop", "--store", "bogus://bucket"], ["unsupported store URI"]),
        (["data", "stage", "webshop", "--seed", "-1", "--out", str(tmp_path / "s")], ["--seed"]),
        (["data", "stage", "webshop", "--source", "webshop-real:x", "--out", str(tmp_path / "r")],
         ["NUM_PRODUCTS"]),
        (["data", "verify", str(tmp_path / "nothing")], ["neither an artifact"]),
    ]  # fmt: skip
    for argv, needles in cases:
        code, _, err = run(capsys, *argv)
        assert_one_line_error(code, err, *needles)
    bad_json = tmp_path / "bad"
    bad_json.mkdir()
    (bad_json / "catalogue.json").write_text("[{not json")
    (bad_json / "goals.jsonl").write_text("")
    code, _, err = run(
        capsys, "data", "stage", "webshop", "--source", str(bad_json), "--out", str(tmp_path / "b")
    )
    assert_one_line_error(code, err, "webshop source")


def test_score_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps({"id": "1", "question": "q", "answer": "s\n#### 4"}) + "\n")
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "1", "prediction": "4"}) + "\n")
    cases = {
        "missing predictions": (
            ["gsm8k", str(tmp_path / "none.jsonl"), str(refs)],
            ["predictions file not found"],
        ),
        "not JSON": (["gsm8k", str(refs.with_name("x.jsonl")), str(refs)], ["not a JSON line"]),
        "unknown id": (["gsm8k", str(tmp_path / "unknown.jsonl"), str(refs)], ["not in the references"]),
        "not a string": (["gsm8k", str(tmp_path / "number.jsonl"), str(refs)], ["must be a string"]),
        "wrong reference format": (["humaneval", str(good), str(refs)], ["HumanEval format"]),
        "no offline scoring": (["arith", str(good), str(refs)], ["does not support offline scoring"]),
        "webshop without catalogue": (["webshop", str(good), str(refs)], ["catalogue.json"]),
        "unknown task": (["nosuch", str(good), str(refs)], ["unknown task"]),
    }
    refs.with_name("x.jsonl").write_text("{oops\n")
    (tmp_path / "unknown.jsonl").write_text(json.dumps({"id": "9", "prediction": "4"}) + "\n")
    (tmp_path / "number.jsonl").write_text(json.dumps({"id": "1", "prediction": 4}) + "\n")
    for label, ((task, pred, ref), needles) in cases.items():
        code, _, err = run(capsys, "tasks", "score", task, "--predictions", pred, "--references", ref)
        assert code == 2, label
        assert_one_line_error(code, err, *needles)
    argv = ["--predictions", str(good), "--references", str(refs), "--details", str(refs / "x" / "d.jsonl")]
    code, _, err = run(capsys, "tasks", "score", "gsm8k", *argv)
    assert_one_line_error(code, err, "cannot write --details")


def test_describe_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    for name in TASKS:
        code, out, _ = run(capsys, "tasks", "describe", name, "--protocol", "a2rl")
        assert code == 0 and out.startswith("# Task: ") and name in out.splitlines()[0]
        # `reference`: the reference's own description where a task ships one (its first line).
        code, out, _ = run(capsys, "tasks", "describe", name, "--protocol", "reference")
        assert code == 0 and out.startswith("#")
    code, out, _ = run(capsys, "tasks", "describe", "webshop", "--protocol", "a2rl")
    assert "100 new tokens" in out and "reward ≥ 0.5" not in out and "at least 0.5" in out


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Any]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_cli_reference_names_every_command_and_flag() -> None:
    """docs/cli.md documents every command, subcommand and flag the parser has."""
    from a2rl_cli import build_parser

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    missing = []
    for path, parser in _commands(build_parser()):
        if path and f"a2rl {' '.join(path)}" not in text:
            missing.append(" ".join(path))
        for action in parser._actions:
            missing += [
                f"{' '.join(path)} {o}"
                for o in action.option_strings
                if o not in ("-h", "--help") and o not in text
            ]
    assert missing == []
