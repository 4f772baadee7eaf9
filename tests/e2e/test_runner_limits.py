"""A hostile agent against the agent's limits in `a2rl run` (the local sandbox, run as `make test`
runs it): a memory hog, a fork bomb and a disk filler each end the run with their own reason,
and what the agent submitted first is kept, scored and in the report."""

from __future__ import annotations

import errno
import json
import tempfile
import textwrap
from pathlib import Path

import a2rl_runner.run as run_module
import pytest
from a2rl_runner.run import run_benchrun

from a2rl import paths
from a2rl.api.benchrun import BenchRun
from a2rl.limits import CGROUP_ROOT
from tests.support.run_support import arith_spec

pytestmark = pytest.mark.slow

#: Submits the base model first (honest), then does what the test names.
AGENT = textwrap.dedent(
    """
    import json, os, shutil, subprocess, sys, time, urllib.request
    shutil.copytree(os.environ["MODEL_PATH"], "output/v1")
    req = urllib.request.Request(os.environ["GRADING_SERVER_URL"] + "/submit",
                                 data=json.dumps({"model_path": "output/v1"}).encode(),
                                 headers={"Content-Type": "application/json"})
    print("submitted", json.load(urllib.request.urlopen(req, timeout=300))["submission_id"], flush=True)
    move = os.environ["MOVE"]
    if move == "memory":  # a training run that never frees its batches
        hog = []
        while True:
            hog.append(bytearray(64 << 20))
    elif move == "processes":  # a fork bomb (bounded: 20,000 sleepers at most)
        children = []
        for _ in range(20000):
            try:
                children.append(subprocess.Popen(["sleep", "600"]))
            except OSError as exc:
                print("fork refused:", exc, flush=True)
                time.sleep(60)
    elif move == "disk":  # checkpoints written until the disk is full
        os.makedirs("checkpoints", exist_ok=True)
        for i in range(64):
            with open(f"checkpoints/step-{i}.bin", "wb") as f:
                for _ in range(4):
                    f.write(os.urandom(16 << 20))
        time.sleep(120)
    """
)


def _run(tmp_path: Path, move: str, resources: dict[str, str]) -> tuple[object, Path, str]:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    spec = arith_spec(agent, wall_s=300, grace_s=2, limit=5, resources=resources)
    spec["agent"]["env"] = [{"name": "MOVE", "value": move}]
    run = BenchRun.model_validate({"metadata": {"name": f"limits-{move}"}, "spec": spec})
    store = tmp_path / "store"
    outcome = run_benchrun(run, store_uri=str(store), progress=True)
    return outcome, store / outcome.prefix, outcome.end_reason


@pytest.mark.parametrize(
    ("move", "resources", "reason"),
    [
        ("memory", {"memory": "1Gi"}, "memory_limit_exceeded"),
        ("disk", {"workspaceSize": "256Mi", "ephemeralStorage": "256Mi"}, "disk_limit_exceeded"),
    ],
)
def test_a_limit_hit_ends_the_run_with_its_reason_and_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], move: str, resources: dict[str, str], reason: str
) -> None:
    outcome, run_dir, end_reason = _run(tmp_path, move, resources)
    out = capsys.readouterr().out
    assert end_reason == reason, out[-3000:]
    assert "submitted 1" in out and "[a2rl] agent limits: mechanism" in out
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["end_reason"] == reason and run_json["agent_limits"].startswith("mechanism ")
    assert outcome.scores.valid_submissions == 1  # type: ignore[attr-defined]
    report = json.loads((run_dir / "report" / "report.json").read_text())
    assert report["run"]["end_reason"] == reason and report["total_submissions"] == 1
    assert report["run"]["agent_limits"] == run_json["agent_limits"]
    assert f"| Agent limits | {run_json['agent_limits']} |" in (run_dir / "report" / "report.md").read_text()


def _agent_cgroups() -> set[Path]:
    """The agents' cgroups under this process's own, in every v1 hierarchy or the unified one."""
    found: set[Path] = set()
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, own = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["unified", ""]:
            base = CGROUP_ROOT / name / own.lstrip("/") if name else CGROUP_ROOT / own.lstrip("/")
            if base.is_dir():
                found |= set(base.glob("a2rl-agent-*"))
    return found


def test_a_failure_before_the_agent_starts_leaves_no_cgroup_or_scratch_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder cannot be built (here: its log directory vanished under it): the run fails
    with that error, and the agent's cgroups, its scratch and its socket directory are gone."""
    before = _agent_cgroups()
    sockets_before = set(Path(tempfile.gettempdir()).glob("a2rl-sock-*"))
    scratches: list[Path] = []

    def broken_recorder(*args: object, **kwargs: object) -> object:
        scratches.extend(paths.workspaces_dir().glob("limits-cleanup-*.scratch"))
        raise OSError(errno.ENOENT, "No such file or directory", "logs/recorder.log")

    monkeypatch.setattr(run_module, "RecorderProcess", broken_recorder)
    agent = tmp_path / "agent.py"
    agent.write_text("print('never started')\n")
    spec = arith_spec(agent, wall_s=60, grace_s=2, limit=5)
    run = BenchRun.model_validate({"metadata": {"name": "limits-cleanup"}, "spec": spec})
    with pytest.raises(OSError, match=r"recorder\.log"):
        run_benchrun(run, store_uri=str(tmp_path / "store"), progress=False)
    assert _agent_cgroups() == before
    assert set(Path(tempfile.gettempdir()).glob("a2rl-sock-*")) == sockets_before
    assert scratches and all(not s.exists() for s in scratches)
