"""`a2rl recorder setup` (the workspace pod's first init container) against a local store: the
workspace it writes, the baseline submission it records, and its refusals. The cluster e2e
(`tests/e2e/test_cluster_e2e.py`) runs the same command from the generated pod spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from a2rl_recorder.config import RecorderConfig
from a2rl_recorder.workspace_setup import recorded_base_digest, setup_workspace
from a2rl_tasks import get_task
from a2rl_tasks.artifacts import stage_to_store

from a2rl import constants as c
from a2rl.contracts.setup import SetupParams
from a2rl.errors import A2rlError
from a2rl.models.resolve import resolve_base_model
from a2rl.store.cas import hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

PREFIX = "team/demo-abc123"
PARAMS = SetupParams(base_model_source="builtin:tiny", base_model_name="Org/Tiny", seed=0, grace_s=7)


def writable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o222)  # mode bits: root passes any os.access check


def recorder_env(store_root: Path, workspace: Path) -> dict[str, str]:
    return {
        c.ENV_STORE_URI: str(store_root),
        c.ENV_RUN_PREFIX: PREFIX,
        c.ENV_WORKSPACE: str(workspace),
        c.ENV_TASK: "arith",
        c.ENV_RUN_TIMEOUT: "900",
        c.ENV_MAX_SUBMISSIONS: "4",
        c.ENV_RECORDER_DISPATCH: c.DISPATCH_CLUSTER,
        c.ENV_RUN_NAME: "demo",
        c.ENV_RUN_NAMESPACE: "team",
        c.ENV_RUN_UID: "abc123",
    }


@pytest.fixture(scope="module")
def staged_store(tmp_path_factory: pytest.TempPathFactory) -> LocalStore:
    store = LocalStore(tmp_path_factory.mktemp("store"))
    stage_to_store(get_task("arith"), store, source=None, seed=0)
    return store


def test_setup_writes_the_workspace_and_records_the_base_model_as_submission_zero(
    staged_store: LocalStore, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "lost+found").mkdir()  # what a fresh ext4 volume holds
    config = RecorderConfig.from_env(recorder_env(staged_store.root, workspace))
    created: list[int] = []
    lines: list[str] = []

    def create(index: int) -> dict[str, Any]:
        created.append(index)
        return {"metadata": {"name": f"demo-{index:05d}"}}

    manifest = setup_workspace(config, staged_store, PARAMS, create_submission=create, say=lines.append)

    model = workspace / "models" / "Org_Tiny"
    digest = hash_tree(resolve_base_model("builtin:tiny")).digest
    assert hash_tree(model).digest == digest and not writable(model / "config.json")
    assert (workspace / "data" / "train.jsonl").is_file() and not writable(workspace / "data")
    assert {p.name for p in workspace.iterdir()} >= {"code", "output", "description.md", "instructions.md"}
    # The default protocol (reference): the reference's instructions.md, plus this run's cap.
    instructions = (workspace / "instructions.md").read_text()
    assert instructions.startswith("#AutoRL-Bench task description") and "at most 4 times" in instructions
    assert json.loads((workspace / "run_meta.json").read_text())["timeout_s"] == 900
    # No held-out row reached the workspace.
    heldout_prefix = "data/arith/" + next(
        k.split("/")[2] for k in staged_store.list("data/arith") if "/heldout/" in k
    )
    heldout_rows = staged_store.get_bytes(f"{heldout_prefix}/heldout/heldout.jsonl").decode().splitlines()
    workspace_text = "".join(p.read_text() for p in workspace.rglob("*.jsonl"))
    assert heldout_rows and not any(row in workspace_text for row in heldout_rows)
    # Submission 0: the base model's snapshot, recorded and handed to the operator.
    layout = RunLayout.from_prefix(PREFIX)
    stored = staged_store.get_json(layout.submission_manifest(0))
    assert stored == manifest.to_json() and stored["model_digest"] == digest
    assert stored["identical_to_base"] is True and stored["model_path"] == "models/Org_Tiny"
    assert all(staged_store.exists(layout.blob(f["sha256"])) for f in stored["model"]["files"])
    assert created == [0]
    assert recorded_base_digest(staged_store, layout) == digest
    assert any("baseline submission demo-00000 created" in line for line in lines)


def test_setup_refuses_unstaged_data_and_a_used_workspace_with_clear_messages(
    staged_store: LocalStore, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = RecorderConfig.from_env(recorder_env(staged_store.root, workspace))
    seed7 = SetupParams("builtin:tiny", "tiny", seed=7, grace_s=5)
    with pytest.raises(A2rlError, match=r"not staged .* run `a2rl data stage arith --seed 7 --store "):
        setup_workspace(config, staged_store, seed7, create_submission=lambda i: {}, say=lambda s: None)
    (workspace / "code").mkdir()
    (workspace / "code" / "old.py").write_text("x = 1\n")
    with pytest.raises(A2rlError, match="is not empty"):
        setup_workspace(config, staged_store, PARAMS, create_submission=lambda i: {}, say=lambda s: None)
    assert (workspace / "code" / "old.py").read_text() == "x = 1\n"  # nothing overwritten


def test_setup_cli_refuses_local_mode_in_one_line(staged_store: LocalStore, tmp_path: Path) -> None:
    env = {**recorder_env(staged_store.root, tmp_path), c.ENV_RECORDER_DISPATCH: c.DISPATCH_LOCAL}
    env[c.ENV_HELDOUT_PATH] = str(tmp_path)
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "a2rl"), "recorder", "setup",
         "--base-model-source", "builtin:tiny", "--base-model-name", "tiny"],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "prepares a cluster run" in proc.stderr and "Traceback" not in proc.stderr


def test_setup_restores_a_base_model_pushed_to_the_store(
    staged_store: LocalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from a2rl.models.library import push_model

    monkeypatch.setenv(c.ENV_CACHE_DIR, str(tmp_path / "pod-cache"))  # the pod's empty scratch
    pushed = push_model(staged_store, "tiny-pushed", resolve_base_model("builtin:tiny"), say=lambda s: None)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = recorder_env(staged_store.root, workspace)
    env[c.ENV_RUN_PREFIX] = "team/pushed-def456"  # a run of its own: none of its blobs exist yet
    config = RecorderConfig.from_env(env)
    params = SetupParams("store:tiny-pushed", "tiny", seed=0, grace_s=5)
    lines: list[str] = []
    manifest = setup_workspace(config, staged_store, params, create_submission=lambda i: {}, say=lines.append)
    assert hash_tree(workspace / "models" / "tiny").digest == pushed.digest == manifest.model_digest
    # The run's snapshot of the base model is copied inside the store, not uploaded again.
    (snapshot_line,) = [line for line in lines if "in the store" in line]
    assert "0 file(s), 0 bytes uploaded" in snapshot_line and " 0 bytes copied" not in snapshot_line
