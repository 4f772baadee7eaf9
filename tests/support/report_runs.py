"""Test data and helpers shared by several test modules (moved out of test_report_store.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from a2rl.store.cas import TreeManifest, hash_tree
from a2rl.store.layout import RunLayout
from a2rl.store.local import LocalStore

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

#: report.json's top-level keys of every run (the driver and trajectory sections are extra).
CLASSIC_KEYS = {
    "schema_version",
    "run",
    "baseline_score",
    "best_score",
    "best_submission",
    "improvement",
    "total_submissions",
    "valid_submissions",
    "route",
    "headline",
    "baseline",
    "metrics",
    "submissions",
    "revisions",
    "timeline",
}


def iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def tree(root: Path, files: dict[str, str]) -> TreeManifest:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return hash_tree(root)


class RunWriter:
    """Writes a run's documents exactly as the schemas contract describes them."""

    def __init__(
        self,
        store: LocalStore,
        tmp: Path,
        name: str = "demo",
        uid: str = "0123456789ab",
        start_offset_s: float = 0.0,
    ) -> None:
        self.store = store
        self.tmp = tmp
        self.layout = RunLayout("local", name, uid)
        self.start = start_offset_s
        self.base = tree(tmp / f"base-{name}-{uid}", {"config.json": "{}", "model.safetensors": "weights"})

    def run_json(self, ended: float | None = 1800.0, budget: int = 1800, **extra: Any) -> None:
        doc = {
            "name": self.layout.name,
            "namespace": "local",
            "uid": self.layout.uid,
            "task": "arith",
            "base_model": {"name": "tiny", "source": "builtin:tiny", "digest": self.base.digest},
            "agent": {"command": ["python", "agent.py"], "image": None},
            "driver": None,
            "budget": {"wall_time_seconds": budget, "max_submissions": None},
            "spec": {},
            "started_at": iso(self.start),
            "deadline": iso(self.start + budget),
            "ended_at": iso(self.start + ended) if ended is not None else None,
            "end_reason": "completed" if ended is not None else None,
            "agent_exit_code": 0 if ended is not None else None,
            "evaluator_version": "arith-1",
            "mode": "local",
        }
        doc.update(extra)
        self.store.put_json(self.layout.run_json, doc)

    def submission(
        self,
        index: int,
        t: float,
        model: TreeManifest | None,
        score: float | None,
        error: str | None = None,
        result: bool = True,
        revision: int | None = None,
    ) -> None:
        model = model or self.base
        self.store.put_json(
            self.layout.submission_manifest(index),
            {
                "index": index,
                "submitted_at": iso(self.start + t),
                "model_path": "models/tiny" if index == 0 else f"output/v{index}",
                "model": model.to_json(),
                "model_digest": model.digest,
                "base_model_digest": self.base.digest,
                "identical_to_base": model.digest == self.base.digest,
                "code_revision": revision,
                "code_digest": None,
                "request": {"model_path": f"output/v{index}"},
            },
        )
        if result:
            self.store.put_json(
                self.layout.submission_result(index),
                {
                    "index": index,
                    "task": "arith",
                    "score": score,
                    "error": error,
                    "evaluator_version": "arith-1",
                    "backend": "transformers",
                    "n": 200,
                    "correct": int((score or 0) * 2),
                    "metrics": {},
                    "model_digest": model.digest,
                    "started_at": iso(self.start + t),
                    "finished_at": iso(self.start + t + 5),
                    "duration_s": 5.0,
                },
            )

    def revision(self, index: int, t: float, files: dict[str, str], reason: str = "change") -> None:
        manifest = tree(self.tmp / f"code-{self.layout.uid}-{index}", files)
        self.store.put_json(
            self.layout.revision(index),
            {
                "index": index,
                "created_at": iso(self.start + t),
                "reason": reason,
                "tree": manifest.to_json(),
                "digest": manifest.digest,
                "files_uploaded": len(files),
                "bytes_uploaded": 100,
            },
        )


def sample_run(tmp: Path, store: LocalStore | None = None, **kwargs: Any) -> RunWriter:
    """A finished run: baseline 5, one invalid, one copy of the base, an improvement, a regression."""
    store = store or LocalStore(tmp / "store")
    w = RunWriter(store, tmp, **kwargs)
    w.run_json()
    w.submission(0, -20, None, 5.0)
    w.revision(1, 30, {"train.py": "print(1)\n"})
    w.revision(2, 200, {"train.py": "print(2)\n", "sft.py": "x = 1\n"}, reason="submit")
    trained = tree(tmp / f"m1-{w.layout.uid}", {"config.json": "{}", "model.safetensors": "trained"})
    better = tree(tmp / f"m2-{w.layout.uid}", {"config.json": "{}", "model.safetensors": "better"})
    w.submission(1, 120, trained, None, error="model could not be loaded")
    w.submission(2, 150, None, 5.0, revision=1)
    w.submission(3, 200, trained, 42.5, revision=2)
    w.submission(4, 600, better, 40.0, revision=2)
    w.submission(5, 1500, better, None, result=False, revision=2)  # evaluation never finished
    return w
