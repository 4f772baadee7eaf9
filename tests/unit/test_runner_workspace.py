"""The local workspace: copies (not links), read-only inputs, no held-out data, agent docs."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from a2rl.errors import A2rlError
from a2rl.workspace import (
    create_workspace,
    remove_workspace,
    render_instructions,
    run_meta,
    sanitize_model_name,
    update_run_meta,
)


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    model = tmp_path / "cache" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "sub").mkdir()
    (model / "sub" / "weights.bin").write_bytes(b"\0" * 64)
    blob = tmp_path / "cache" / "blob"
    blob.write_text("tokenizer")
    (model / "tokenizer.json").symlink_to(blob)  # like a Hugging Face cache snapshot
    staged = tmp_path / "cache" / "data"
    (staged / "train").mkdir(parents=True)
    (staged / "heldout").mkdir(parents=True)
    (staged / "train" / "train.jsonl").write_text('{"id": "t1"}\n')
    (staged / "heldout" / "heldout.jsonl").write_text('{"id": "h1", "secret": true}\n')
    return model, staged / "train", staged / "heldout"


def _create(tmp_path: Path, name: str = "Org/My Model-1.5B") -> tuple[Path, object]:
    model, train, heldout = _inputs(tmp_path)
    root = tmp_path / "ws" / "run-abc"
    ws = create_workspace(
        root,
        model_src=model,
        base_model_name=name,
        train_dir=train,
        heldout_dir=heldout,
        description="# Task\n",
        instructions="# Instructions\n",
        meta=run_meta(None, 300),
    )
    return root, ws


def test_layout_and_contents(tmp_path: Path) -> None:
    root, ws = _create(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["code", "output", "models", "data", "description.md", "instructions.md", "run_meta.json"]
    )
    assert list((root / "code").iterdir()) == []
    assert list((root / "output").iterdir()) == []
    model_dir = root / "models" / "Org_My_Model-1.5B"
    assert ws.model_dir == model_dir  # type: ignore[attr-defined]
    assert (model_dir / "config.json").read_text() == '{"model_type": "llama"}'
    assert (model_dir / "sub" / "weights.bin").stat().st_size == 64
    assert (root / "data" / "train.jsonl").is_file()
    assert (root / "description.md").read_text() == "# Task\n"
    assert json.loads((root / "run_meta.json").read_text()) == {
        "start_time": None,
        "timeout_s": 300,
        "last_submit_time": None,
        "end_time": None,
    }


def test_copies_not_links(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    for path in root.rglob("*"):
        assert not path.is_symlink(), f"{path} is a symlink"
    assert (root / "models" / "Org_My_Model-1.5B" / "tokenizer.json").read_text() == "tokenizer"


def test_model_and_data_are_read_only(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    for top in (root / "models", root / "data"):
        for path in [top, *top.rglob("*")]:
            assert path.stat().st_mode & write_bits == 0, f"{path} is writable"
    for writable in (root / "code", root / "output", root / "run_meta.json"):
        assert writable.stat().st_mode & stat.S_IWUSR
    if os.geteuid() != 0:  # root ignores permission bits
        with pytest.raises(PermissionError):
            (root / "data" / "train.jsonl").write_text("overwritten")


def test_heldout_never_copied(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    for path in root.rglob("*"):
        assert "heldout" not in path.name
        if path.is_file():
            assert b"secret" not in path.read_bytes()


def test_overlapping_splits_refused(tmp_path: Path) -> None:
    model, train, _ = _inputs(tmp_path)
    with pytest.raises(A2rlError, match="overlaps"):
        create_workspace(
            tmp_path / "ws2",
            model_src=model,
            base_model_name="m",
            train_dir=train.parent,
            heldout_dir=train.parent / "heldout",
            description="",
            instructions="",
            meta=run_meta(None, 1),
        )


def test_existing_workspace_refused(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    model, train, heldout = _inputs(tmp_path / "again")
    with pytest.raises(A2rlError, match="already exists"):
        create_workspace(
            root,
            model_src=model,
            base_model_name="m",
            train_dir=train,
            heldout_dir=heldout,
            description="",
            instructions="",
            meta=run_meta(None, 1),
        )


def test_remove_workspace_undoes_read_only(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    remove_workspace(root)
    assert not root.exists()


def test_update_run_meta_keeps_other_fields(tmp_path: Path) -> None:
    root, _ = _create(tmp_path)
    meta_path = root / "run_meta.json"
    meta = json.loads(meta_path.read_text())
    meta["last_submit_time"] = 1700000100
    meta_path.write_text(json.dumps(meta))
    update_run_meta(root, end_time=1700000200.7)
    assert json.loads(meta_path.read_text()) == {
        "start_time": None,
        "timeout_s": 300,
        "last_submit_time": 1700000100,
        "end_time": 1700000200,
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [("tiny", "tiny"), ("Qwen/Qwen2.5-1.5B", "Qwen_Qwen2.5-1.5B"), ("../../etc", "etc"), ("..", "model")],
)
def test_sanitize_model_name(name: str, expected: str) -> None:
    assert sanitize_model_name(name) == expected


def test_instructions_state_the_rules() -> None:
    text = render_instructions(
        task="arith", base_model="tiny", base_name="tiny", budget_s=330, grace_s=30, max_submissions=5
    )
    for needle in (
        "330 seconds (5 min 30 s)",
        "models/tiny/",
        "POST /submit",
        "GET /time",
        "output/",
        "at most **5**",
        "Best of budget",
        "SIGKILL",
        "What is recorded",
        "`code/`",
    ):
        assert needle in text, needle
    unlimited = render_instructions(
        task="arith", base_model="tiny", base_name="tiny", budget_s=60, grace_s=5, max_submissions=None
    )
    assert "no limit on the number of submissions" in unlimited
