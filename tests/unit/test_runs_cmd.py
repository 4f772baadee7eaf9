"""`a2rl runs list|compare|rm|prune|export|import` on real LocalStore trees (a2rl.runs_admin)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from a2rl_cli import main

from a2rl import paths
from a2rl.constants import LABEL_CAMPAIGN
from a2rl.errors import A2rlError
from a2rl.records.run import RunRecord
from a2rl.runs_admin.archive import MANIFEST_NAME
from a2rl.runs_admin.durations import format_bytes, parse_duration
from a2rl.runs_admin.local_files import remove_tree
from a2rl.runs_admin.state import ACTIVITY_WINDOW, RUNNING, STALE, STARTING, run_state
from a2rl.store.local import LocalStore
from tests.support.report_runs import T0, RunWriter, sample_run

STACK_AGENT: dict[str, Any] = {
    "command": [],
    "image": None,
    "stack": "claude-code",
    "mode": "free",
    "stack_version": "2.0",
}
DRIVER = {"provider": "anthropic", "model": "claude-sonnet-4-5"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A2RL_HOME of this test alone (workspaces, logs, last-store)."""
    path = tmp_path / "home"
    monkeypatch.setenv("A2RL_HOME", str(path))
    return path


@pytest.fixture
def store(tmp_path: Path, home: Path) -> LocalStore:
    del home
    return LocalStore(tmp_path / "store")


def offset_now(hours_ago: float = 0.0) -> float:
    """`RunWriter`'s start offset (seconds after T0) of a run that started `hours_ago` hours ago."""
    return (datetime.now(UTC) - T0).total_seconds() - hours_ago * 3600


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def objects(store: LocalStore, prefix: str = "") -> dict[str, bytes]:
    return {key: store.get_bytes(key) for key in store.list(prefix)}


def fake_workspace(ref: str) -> list[Path]:
    """The run's workspace (a read-only model copy inside, as the runner leaves it), scratch and logs."""
    workspace = paths.workspaces_dir() / ref
    model = workspace / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"w" * 5000)
    (workspace / "code").mkdir()
    (workspace / "code" / "train.py").write_text("print(1)\n")
    os.chmod(model / "model.safetensors", 0o444)
    os.chmod(model, 0o555)
    os.chmod(workspace / "models", 0o555)
    scratch = workspace.with_name(f"{ref}.scratch")
    (scratch / "home").mkdir(parents=True)
    logs = paths.run_logs_dir(ref)
    logs.mkdir(parents=True)
    (logs / "agent.log").write_text("done\n")
    old = (datetime.now(UTC) - timedelta(days=1)).timestamp()
    os.utime(logs / "agent.log", (old, old))  # logs not written lately: the run is not active
    return [workspace, scratch, logs]


def four_runs(store: LocalStore, tmp: Path) -> dict[str, RunWriter]:
    """Finished runs started in this order: sft (old), grpo, a stack run of a campaign; then one
    still going (started an hour ago)."""
    old = sample_run(tmp, store, name="sft", uid="aaaaaaaaaaaa", start_offset_s=0)
    grpo = sample_run(tmp, store, name="grpo", uid="bbbbbbbbbbbb", start_offset_s=3600)
    grpo.run_json(agent={"command": ["python", "-m", "a2rl_agents.grpo_baseline"], "image": None})
    stack = sample_run(tmp, store, name="cc", uid="cccccccccccc", start_offset_s=7200)
    stack.run_json(
        agent=STACK_AGENT,
        driver=DRIVER,
        driver_cost_usd=1.25,
        labels={LABEL_CAMPAIGN: "paper"},
        task="gsm8k",
        spec={"seed": 3, "budget": {"wallTimeSeconds": 1800, "driverCostUSD": 5.0}},
        protocol="reference",
    )
    live = RunWriter(store, tmp, name="live", uid="dddddddddddd", start_offset_s=offset_now(hours_ago=1))
    live.run_json(ended=None, budget=4 * 3600)
    live.submission(0, -20, None, 10.0)
    live.submission(1, 60, None, 12.0)
    live.submission(2, 90, None, None, result=False)
    return {"old": old, "grpo": grpo, "stack": stack, "live": live}


# --- list ------------------------------------------------------------------------------------


def test_list_is_newest_first_with_state_scores_and_agent(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    four_runs(store, tmp_path)
    code, out, _ = run_cli(capsys, "runs", "list", "--store", str(store.root))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["RUN", "TASK", "AGENT", "STATE"]
    refs = [line.split()[0] for line in lines[1:]]
    assert refs == ["live-dddddddddddd", "cc-cccccccccccc", "grpo-bbbbbbbbbbbb", "sft-aaaaaaaaaaaa"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["live-dddddddddddd"].split()[1:4] == ["arith", "agent.py", "running"]
    assert rows["cc-cccccccccccc"].split()[1:4] == ["gsm8k", "claude-code", "completed"]
    assert "a2rl_agents.grpo_baseline" in rows["grpo-bbbbbbbbbbbb"]
    # best, baseline, improvement, valid/total, cost
    assert rows["sft-aaaaaaaaaaaa"].split()[-5:] == ["42.5", "5.0", "+37.5", "3/5", "-"]
    assert rows["cc-cccccccccccc"].split()[-1] == "$1.25"
    assert rows["live-dddddddddddd"].split()[-5:] == ["12.0", "10.0", "+2.0", "1/2", "-"]


def test_list_filters_and_json(store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    four_runs(store, tmp_path)
    root = str(store.root)

    def listed(*flags: str) -> list[dict[str, Any]]:
        code, out, _ = run_cli(capsys, "runs", "list", "--json", "--store", root, *flags)
        assert code == 0
        result: list[dict[str, Any]] = json.loads(out)
        return result

    every = listed()
    assert [r["ref"] for r in every] == [
        "live-dddddddddddd",
        "cc-cccccccccccc",
        "grpo-bbbbbbbbbbbb",
        "sft-aaaaaaaaaaaa",
    ]
    sft = every[-1]
    assert sft["prefix"] == "local/sft-aaaaaaaaaaaa" and sft["task"] == "arith"
    assert sft["state"] == "completed" and sft["live"] is False and sft["end_reason"] == "completed"
    assert (sft["baseline_score"], sft["best_score"], sft["best_submission"]) == (5.0, 42.5, 3)
    assert sft["improvement"] == 37.5
    assert (sft["valid_submissions"], sft["total_submissions"]) == (3, 5)
    assert sft["duration_s"] == 1800.0 and sft["source"] == "records"
    assert every[0]["state"] == "running" and every[0]["live"] is True and every[0]["ended_at"] is None
    cc = every[1]
    assert cc["campaign"] == "paper" and cc["labels"] == {LABEL_CAMPAIGN: "paper"}
    assert cc["driver_cost_usd"] == 1.25 and cc["agent"] == "claude-code"

    assert [r["ref"] for r in listed("--task", "gsm8k")] == ["cc-cccccccccccc"]
    assert [r["ref"] for r in listed("--campaign", "paper")] == ["cc-cccccccccccc"]
    assert listed("--campaign", "other") == []
    assert [r["ref"] for r in listed("--stack", "claude-code")] == ["cc-cccccccccccc"]
    assert [r["ref"] for r in listed("--stack", "a2rl_agents.grpo_baseline")] == ["grpo-bbbbbbbbbbbb"]
    assert [r["ref"] for r in listed("--task", "arith", "--stack", "agent.py")] == [
        "live-dddddddddddd",
        "sft-aaaaaaaaaaaa",
    ]

    code, out, _ = run_cli(capsys, "runs", "list", "--store", root, "--task", "nope")
    assert code == 0 and out == f"no run matches the filters among the 4 run(s) in store {store.uri}\n"


def test_list_reads_a_current_report(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = sample_run(tmp_path, store)
    assert main(["report", "--json", "--store", str(store.root)]) == 0
    capsys.readouterr()
    # A later result is in the records, but the stored report (written after the end) is what counts.
    store.put_json(w.layout.submission_result(5), {"index": 5, "score": 60.0, "error": None})
    code, out, _ = run_cli(capsys, "runs", "list", "--json", "--store", str(store.root))
    assert code == 0
    (row,) = json.loads(out)
    assert row["source"] == "report" and row["best_score"] == 42.5 and row["total_submissions"] == 5


def test_list_of_an_empty_store_says_so(store: LocalStore, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "runs", "list", "--store", str(store.root))
    assert (code, out) == (0, f"no runs in store {store.uri}\n")
    code, out, _ = run_cli(capsys, "runs", "list", "--json", "--store", str(store.root))
    assert (code, json.loads(out)) == (0, [])


# --- compare ---------------------------------------------------------------------------------


def test_compare_side_by_side(store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    four_runs(store, tmp_path)
    code, out, _ = run_cli(capsys, "runs", "compare", "sft", "cc-cccccccccccc", "--store", str(store.root))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["sft-aaaaaaaaaaaa", "cc-cccccccccccc"]
    rows = {line[:14].strip(): line[14:].split("  ") for line in lines[1:]}
    cells = {label: [c.strip() for c in row if c.strip()] for label, row in rows.items()}
    assert cells["task"] == ["arith", "gsm8k"]
    assert cells["agent"] == ["agent.py", "claude-code"]
    assert cells["driver model"] == ["-", "anthropic/claude-sonnet-4-5"]
    assert cells["agent mode"] == ["-", "free"]
    assert cells["base model"] == ["tiny", "tiny"]
    assert cells["protocol"] == ["-", "reference"]
    assert cells["seed"] == ["-", "3"]
    assert cells["budget"] == ["30m", "30m, $5.00"]
    assert cells["state"] == ["completed", "completed"]
    assert cells["wall time"] == ["30m", "30m"]
    assert cells["baseline"] == ["5.0", "5.0"]
    assert cells["best"] == ["42.5 (#3)", "42.5 (#3)"]
    assert cells["improvement"] == ["+37.5", "+37.5"]
    assert cells["submissions"] == ["3/5 valid", "3/5 valid"]
    assert cells["driver cost"] == ["-", "$1.25"]
    assert cells["#1"] == ["invalid", "invalid"]
    assert cells["#3"] == ["42.5 *", "42.5 *"]
    assert cells["#4"] == ["40.0", "40.0"]
    assert cells["#5"] == ["pending", "pending"]

    code, out, _ = run_cli(capsys, "runs", "compare", "cc", "live", "--json", "--store", str(store.root))
    cc, live = json.loads(out)
    assert cc["driver_model"] == "anthropic/claude-sonnet-4-5" and cc["seed"] == 3
    assert cc["budget"] == {
        "wall_time_seconds": 1800,
        "max_submissions": None,
        "driver_tokens": None,
        "driver_cost_usd": 5.0,
    }
    assert cc["stack"] == "claude-code" and cc["stack_version"] == "2.0" and cc["agent_mode"] == "free"
    assert live["submissions"] == [
        {"index": 1, "score": 12.0, "status": "valid"},
        {"index": 2, "score": None, "status": "pending"},
    ]
    assert 3500 < live["duration_s"] < 3700  # still going: up to now


def test_compare_names_an_unknown_run(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample_run(tmp_path, store)
    code, _, err = run_cli(capsys, "runs", "compare", "demo", "nope", "--store", str(store.root))
    assert code == 2 and err.startswith("a2rl: error: no run 'nope'") and err.count("\n") == 1


# --- rm and prune ----------------------------------------------------------------------------


def test_rm_deletes_the_runs_records_workspace_and_logs_only(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = four_runs(store, tmp_path)
    store.put_json("baselines/arith/abc/arith-1.json", {"score": 5.0})
    store.put_json("models/tiny/manifest.json", {"name": "tiny"})
    store.put_bytes("models/blobs/" + "0" * 64, b"weights")
    local = fake_workspace("sft-aaaaaaaaaaaa")
    other_local = fake_workspace("grpo-bbbbbbbbbbbb")
    before = objects(store)
    target = runs["old"].layout.prefix
    freed = sum(len(v) for k, v in before.items() if k.startswith(target + "/")) + 5000 + len("print(1)\n")
    freed += len("done\n")

    code, out, _ = run_cli(capsys, "runs", "rm", "sft-aaaaaaaaaaaa", "--yes", "--store", str(store.root))
    assert code == 0
    assert str(local[0]) in out and str(local[1]) in out and str(local[2]) in out
    assert out.splitlines()[-1].startswith("deleted 1 run(s), freed ")
    after = objects(store)
    assert after == {k: v for k, v in before.items() if not k.startswith(target + "/")}
    assert not (store.root / "local" / "sft-aaaaaaaaaaaa").exists()
    assert all(not p.exists() for p in local)
    assert all(p.exists() for p in other_local)
    assert "baselines/arith/abc/arith-1.json" in after and "models/tiny/manifest.json" in after
    # bytes freed as printed: the store objects plus the local files
    assert out.splitlines()[-1] == f"deleted 1 run(s), freed {format_bytes(freed)}"


def test_rm_refuses_a_run_still_going_unless_forced(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = four_runs(store, tmp_path)
    prefix = runs["live"].layout.prefix
    code, _, err = run_cli(capsys, "runs", "rm", "live", "sft", "--yes", "--store", str(store.root))
    assert code == 2 and err.count("\n") == 1
    assert "refusing to delete 1 run(s) that may still be going: live-dddddddddddd (running)" in err
    assert store.exists(f"{prefix}/run.json") and store.exists(runs["old"].layout.run_json)  # nothing deleted
    code, _, _ = run_cli(capsys, "runs", "rm", "live", "--yes", "--force", "--store", str(store.root))
    assert code == 0 and list(store.list(prefix)) == []


def test_rm_asks_on_a_terminal_and_refuses_without_one(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    w = sample_run(tmp_path, store)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run_cli(capsys, "runs", "rm", "demo", "--store", str(store.root))
    assert code == 2 and out == ""
    assert err == "a2rl: error: refusing to delete without --yes (stdin is not a terminal to confirm on)\n"
    assert store.exists(w.layout.run_json)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    code, out, _ = run_cli(capsys, "runs", "rm", "demo", "--store", str(store.root))
    assert code == 1 and "delete 1 run(s)" in out and out.endswith("nothing deleted\n")
    assert store.exists(w.layout.run_json)
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    code, out, _ = run_cli(capsys, "runs", "rm", "demo", "--store", str(store.root))
    assert code == 0 and not store.exists(w.layout.run_json)


def test_prune_older_than_with_dry_run(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = four_runs(store, tmp_path)  # three from T0 (months ago), one started an hour ago
    recent = sample_run(
        tmp_path, store, name="recent", uid="eeeeeeeeeeee", start_offset_s=offset_now(hours_ago=30)
    )
    stale = RunWriter(
        store, tmp_path, name="stale", uid="ffffffffffff", start_offset_s=offset_now(hours_ago=24 * 9)
    )
    stale.run_json(ended=None)  # no end recorded, long past its deadline: its runner died
    root = str(store.root)
    before = objects(store)

    code, out, _ = run_cli(capsys, "runs", "prune", "--older-than", "7d", "--dry-run", "--store", root)
    assert code == 0 and objects(store) == before
    listed = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")][:-1]
    assert sorted(listed) == [
        "cc-cccccccccccc",
        "grpo-bbbbbbbbbbbb",
        "sft-aaaaaaaaaaaa",
        "stale-ffffffffffff",
    ]
    assert "stale-ffffffffffff (stale)" in out
    assert out.splitlines()[-1].startswith("dry run: would delete 4 run(s), freeing ")

    code, out, _ = run_cli(capsys, "runs", "prune", "--older-than", "1d", "--yes", "--store", root)
    assert code == 0
    assert [k for k in objects(store) if k.endswith("/run.json")] == [runs["live"].layout.run_json]
    assert list(store.list(recent.layout.prefix)) == [] and list(store.list(stale.layout.prefix)) == []

    code, out, _ = run_cli(capsys, "runs", "prune", "--older-than", "1d", "--yes", "--store", root)
    assert code == 0 and out.startswith("no run to prune: none started more than 1d ago")
    code, _, err = run_cli(capsys, "runs", "prune", "--older-than", "soon", "--store", root)
    assert code == 2 and "not a duration: 'soon'" in err


def test_prune_skips_a_live_run(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = four_runs(store, tmp_path)
    code, out, _ = run_cli(
        capsys, "runs", "prune", "--older-than", "30m", "--yes", "--store", str(store.root)
    )
    assert code == 0 and "skipping live-dddddddddddd: it may still be going (running)" in out
    assert [k for k in objects(store) if k.endswith("run.json")] == [runs["live"].layout.run_json]


# --- export / import -------------------------------------------------------------------------


def test_export_rm_import_round_trip(
    store: LocalStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = sample_run(tmp_path, store)
    other = sample_run(tmp_path, store, name="other", uid="999999999999", start_offset_s=60)
    root = str(store.root)
    assert main(["report", "demo", "--store", root]) == 0
    report_text = capsys.readouterr().out
    assert main(["report", "demo", "--json", "--store", root]) == 0
    report_json = capsys.readouterr().out
    before = objects(store, w.layout.prefix)
    assert f"{w.layout.report_dir}/report.json" in before

    tar = tmp_path / "run.tar"
    code, out, err = run_cli(capsys, "runs", "export", "demo", "-o", str(tar), "--store", root)
    assert code == 0 and out.startswith(f"exported {w.layout.prefix}: {len(before)} objects")
    assert "exported" in err  # progress on stderr
    with tarfile.open(tar) as t:
        names = t.getnames()
        manifest = json.load(t.extractfile(MANIFEST_NAME))  # type: ignore[arg-type]
    assert sorted(names) == sorted(
        [MANIFEST_NAME, *(f"objects/{k[len(w.layout.prefix) + 1 :]}" for k in before)]
    )
    assert manifest["prefix"] == w.layout.prefix
    entry = next(o for o in manifest["objects"] if o["key"] == "run.json")
    assert entry["sha256"] == hashlib.sha256(before[w.layout.run_json]).hexdigest()
    code, _, err = run_cli(capsys, "runs", "export", "demo", "-o", str(tar), "--store", root)
    assert code == 2 and "exists" in err

    code, out, _ = run_cli(capsys, "runs", "rm", "demo", "--yes", "--store", root)
    assert code == 0 and objects(store, w.layout.prefix) == {}
    code, out, _ = run_cli(capsys, "runs", "import", str(tar), "--store", root)
    assert code == 0 and out.startswith(f"imported {w.layout.prefix} into {store.uri}: {len(before)} objects")
    assert objects(store, w.layout.prefix) == before  # byte for byte
    assert store.exists(other.layout.run_json)
    assert main(["report", "demo", "--store", root]) == 0
    assert capsys.readouterr().out == report_text
    assert main(["report", "demo", "--json", "--store", root]) == 0
    assert capsys.readouterr().out == report_json

    # Again: the same contents are there already; nothing is written.
    code, out, _ = run_cli(capsys, "runs", "import", str(tar), "--store", root)
    assert code == 0 and "with the same contents: nothing written" in out
    # Into another store: the same objects.
    fresh = LocalStore(tmp_path / "store2")
    assert main(["runs", "import", str(tar), "--store", str(fresh.root)]) == 0
    assert objects(fresh) == before


def rewrite_tar(
    src: Path, dest: Path, change: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None
) -> None:
    """Copy the tar `src` to `dest` with members' contents replaced (`change`) and `extra` members added."""
    with tarfile.open(src) as t_in, tarfile.open(dest, "w") as t_out:
        for member in t_in.getmembers():
            data = t_in.extractfile(member).read()  # type: ignore[union-attr]
            data = change.get(member.name, data)
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            t_out.addfile(info, io.BytesIO(data))
        for info in extra or []:
            t_out.addfile(info, io.BytesIO(b"evil") if info.isreg() else None)


@pytest.fixture
def exported(store: LocalStore, tmp_path: Path) -> Iterator[tuple[RunWriter, Path]]:
    w = sample_run(tmp_path, store)
    tar = tmp_path / "run.tar"
    assert main(["runs", "export", "demo", "-o", str(tar), "--store", str(store.root)]) == 0
    yield w, tar


def evil(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = 4 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (evil("../evil"), "a '..' path"),
        (evil("objects/../../evil"), "a '..' path"),
        (evil("/tmp/evil"), "an absolute or odd path"),
        (evil("objects/link", tarfile.SYMTYPE, "/etc/passwd"), "a link"),
        (evil("objects/hard", tarfile.LNKTYPE, "objects/run.json"), "a link"),
        (evil("objects/fifo", tarfile.FIFOTYPE), "not a regular file"),
    ],
)
def test_import_refuses_a_hostile_tar(
    exported: tuple[RunWriter, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    member: tarfile.TarInfo,
    problem: str,
) -> None:
    _w, tar = exported
    hostile = tmp_path / "hostile.tar"
    rewrite_tar(tar, hostile, {}, [member])
    target = LocalStore(tmp_path / "target")
    code, _, err = run_cli(capsys, "runs", "import", str(hostile), "--store", str(target.root))
    assert code == 2 and err.count("\n") == 1
    assert f"refusing the archive: member {member.name!r} is {problem}" in err
    assert list(target.list("")) == []  # nothing written
    assert not (tmp_path / "evil").exists()


def test_import_refuses_a_tampered_object(
    store: LocalStore, exported: tuple[RunWriter, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w, tar = exported
    key = "submissions/00003/result.json"
    tampered = tmp_path / "tampered.tar"
    doc = json.loads(store.get_bytes(f"{w.layout.prefix}/{key}"))
    doc["score"] = 99.0
    rewrite_tar(tar, tampered, {f"objects/{key}": json.dumps(doc).encode()})
    target = LocalStore(tmp_path / "target")
    code, _, err = run_cli(capsys, "runs", "import", str(tampered), "--store", str(target.root))
    assert code == 2
    assert err == (
        f"a2rl: error: refusing the archive: objects/{key} does not match its sha256 in the manifest "
        "(tampered or damaged)\n"
    )
    assert list(target.list("")) == []


def test_import_refuses_a_tar_without_manifest_or_with_unlisted_objects(
    exported: tuple[RunWriter, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _w, tar = exported
    extra = tmp_path / "extra.tar"
    rewrite_tar(tar, extra, {}, [evil("objects/blobs/extra")])
    code, _, err = run_cli(capsys, "runs", "import", str(extra), "--store", str(tmp_path / "t1"))
    assert code == 2 and "objects/blobs/extra is in the tar but not in the manifest" in err
    bare = tmp_path / "bare.tar"
    with tarfile.open(bare, "w") as t:
        t.addfile(evil("objects/run.json"), io.BytesIO(b"evil"))
    code, _, err = run_cli(capsys, "runs", "import", str(bare), "--store", str(tmp_path / "t2"))
    assert code == 2 and f"not an a2rl run export: no {MANIFEST_NAME}" in err
    (tmp_path / "not.tar").write_bytes(b"hello")
    code, _, err = run_cli(
        capsys, "runs", "import", str(tmp_path / "not.tar"), "--store", str(tmp_path / "t3")
    )
    assert code == 2 and "is not a readable tar file" in err


def test_import_refuses_to_overwrite_a_different_run(
    store: LocalStore, exported: tuple[RunWriter, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    w, tar = exported
    changed = {**json.loads(store.get_bytes(w.layout.run_json)), "end_reason": "failed"}
    store.put_json(w.layout.run_json, changed)
    before = objects(store)
    code, _, err = run_cli(capsys, "runs", "import", str(tar), "--store", str(store.root))
    assert code == 2 and err.splitlines()[0].startswith("verified ")  # then one error line
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("a2rl: error: store ")
    assert f"already has a run at {w.layout.prefix} with other contents (run.json differs)" in err
    assert objects(store) == before


def test_import_completes_a_partial_import(
    store: LocalStore, exported: tuple[RunWriter, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _w, tar = exported
    before = objects(store)
    for key in list(before)[: len(before) // 2]:
        if not key.endswith("run.json"):
            store.delete(key)
    code, out, _ = run_cli(capsys, "runs", "import", str(tar), "--store", str(store.root))
    assert code == 0 and "already there" in out
    assert objects(store) == before


# --- the pieces ------------------------------------------------------------------------------


def test_parse_duration() -> None:
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    assert parse_duration("2w") == timedelta(days=14)
    for bad in ("", "7", "d", "-1d", "0s", "7y"):
        with pytest.raises(A2rlError):
            parse_duration(bad)


def test_run_state_rule() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def record(**fields: Any) -> RunRecord:
        return RunRecord.from_json({"budget": {"wall_time_seconds": 3600}, **fields})

    started = (now - timedelta(hours=1, minutes=30)).isoformat()
    assert (
        run_state(record(started_at=started, ended_at=now.isoformat(), end_reason="failed"), now) == "failed"
    )
    assert run_state(record(started_at=started, ended_at=now.isoformat()), now) == "ended"
    # deadline + grace (30 s) + wrap-up margin (1 h) not yet passed, then passed
    assert run_state(record(started_at=started), now) == RUNNING
    assert run_state(record(started_at=(now - timedelta(hours=2, minutes=1)).isoformat()), now) == STALE
    # the spec's grace counts
    late = record(
        started_at=(now - timedelta(hours=2, minutes=1)).isoformat(), spec={"budget": {"graceSeconds": 600}}
    )
    assert run_state(late, now) == RUNNING
    # recent logs on this machine: running whatever the clock says
    old = record(started_at=(now - timedelta(days=3)).isoformat())
    assert run_state(old, now, local_activity=now - ACTIVITY_WINDOW / 2) == RUNNING
    assert run_state(old, now, local_activity=now - ACTIVITY_WINDOW * 2) == STALE
    # not started yet: by run.json's age; unknown age: assumed starting
    assert run_state(record(), now, run_json_written=now - timedelta(hours=1)) == STARTING
    assert run_state(record(), now, run_json_written=now - timedelta(days=1)) == STALE
    assert run_state(record(), now) == STARTING


def test_local_store_delete_prefix_and_sizes(tmp_path: Path) -> None:
    s = LocalStore(tmp_path / "s")
    s.put_bytes("local/a-1/run.json", b"{}")
    s.put_bytes("local/a-1/blobs/x", b"12345")
    s.put_bytes("local/a-10/run.json", b"{}")
    assert list(s.sizes("local/a-1")) == [("local/a-1/blobs/x", 5), ("local/a-1/run.json", 2)]
    assert s.modified_at("local/a-1/run.json") is not None and s.modified_at("nope") is None
    assert s.delete_prefix("local/a-1") == 2
    assert list(s.list("")) == ["local/a-10/run.json"]
    assert s.delete_prefix("local/a-1") == 0
    with pytest.raises(ValueError):
        s.delete_prefix("")
    with pytest.raises(ValueError):
        s.delete_prefix("local/../x")


def test_rm_makes_read_only_trees_deletable(tmp_path: Path) -> None:

    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (root / "link").symlink_to(outside)
    for d in (root / "a" / "b", root / "a"):
        os.chmod(d, stat.S_IRUSR | stat.S_IXUSR)
    remove_tree(root)
    assert not root.exists() and (outside / "keep").read_text() == "keep"
