#!/usr/bin/env python3
"""What the eval process's box costs (`a2rl.eval_sandbox.EvalBox`, local mode): its start, and the
start of an evaluation in it.

    .venv/bin/python bench/eval_box.py [--repeat 5]

Each figure is measured three ways: `box` (bubblewrap and the limits, as the recorder and the
runner start an eval process), `limits` (the limits only: ``A2RL_EVAL_SANDBOX=none``) and `bare`
(the same command started directly). It prints figures; it asserts nothing.

- `start`: from creating the box to the end of `python -c pass` in it (box set-up, bubblewrap,
  the cgroup join, the interpreter), median of `--repeat`.
- `eval start`: the same for what an evaluation does first: import torch and transformers, load
  the tiny base model from disk, greedy-generate 8 tokens for one prompt; median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from a2rl.constants import ENV_EVAL_SANDBOX
from a2rl.eval_sandbox import EvalBox
from a2rl.models.tiny import build_tiny_model

EVAL_START = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
ids = tok("Question: What is 47 + 38?\\nAnswer: ", return_tensors="pt").input_ids
model.generate(ids, max_new_tokens=8, do_sample=False)
"""

MODES = ("box", "limits", "bare")


def _checked(proc: subprocess.CompletedProcess[str], mode: str) -> None:
    if proc.returncode != 0:
        sys.exit(f"bench/eval_box.py: {mode}: exit {proc.returncode}: {proc.stderr[-2000:]}")


def _once(mode: str, argv: list[str]) -> float:
    """Seconds from the box's creation to the command's end."""
    started = time.perf_counter()
    if mode == "bare":
        _checked(subprocess.run(argv, capture_output=True, text=True, check=False), mode)
        return time.perf_counter() - started
    env: Mapping[str, str] = {**os.environ, ENV_EVAL_SANDBOX: "none" if mode == "limits" else "bwrap"}
    shown = [Path(arg) for arg in argv[1:] if arg.startswith("/")]  # the model, as a launcher names it
    with EvalBox("bench-eval", env=env, readable=shown) as box:
        proc = subprocess.run(
            [*box.prefix, *argv],
            env={**os.environ, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            check=False,
        )
        _checked(proc, mode)
        return time.perf_counter() - started


def _median(mode: str, argv: list[str], repeat: int) -> float:
    _once(mode, argv)  # warm the page cache
    return statistics.median(_once(mode, argv) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="a2rl-bench-eval-") as tmp:
        model = build_tiny_model(Path(tmp) / "tiny", seed=0)
        os.chmod(tmp, 0o755)  # readable inside the box, as a store's submission is
        commands = {
            "start": [sys.executable, "-c", "pass"],
            "eval start": [sys.executable, "-c", EVAL_START, str(model)],
        }
        print(f"{'':<8} {'start (ms)':>12} {'eval start (s)':>16}")
        for mode in MODES:
            start = _median(mode, commands["start"], args.repeat) * 1000
            evals = _median(mode, commands["eval start"], args.repeat)
            print(f"{mode:<8} {start:>12.0f} {evals:>16.2f}")


if __name__ == "__main__":
    main()
