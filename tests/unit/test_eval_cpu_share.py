"""An eval process leaves the agent its share of the CPU: it runs niced (`A2RL_EVAL_NICE`) with
its CPU threads bounded (`A2RL_EVAL_THREADS`, default half the cores), so the evaluation of one
submission does not starve the training of the next on a small machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from a2rl.errors import A2rlError
from a2rl.eval_sandbox import DEFAULT_EVAL_NICE, THREAD_ENV, EvalBox, eval_nice, eval_threads, thread_env


def test_threads_default_to_half_the_cores_at_least_one() -> None:
    cores = len(os.sched_getaffinity(0))
    assert eval_threads({}) == max(cores // 2, 1)
    assert eval_threads({"A2RL_EVAL_THREADS": "3"}) == 3
    with pytest.raises(A2rlError):
        eval_threads({"A2RL_EVAL_THREADS": "0"})


def test_thread_env_keeps_what_the_caller_set() -> None:
    env = thread_env({"A2RL_EVAL_THREADS": "2", "OMP_NUM_THREADS": "4"})
    assert env == {name: "2" for name in THREAD_ENV if name != "OMP_NUM_THREADS"}


def test_nice_is_bounded() -> None:
    assert eval_nice({}) == DEFAULT_EVAL_NICE
    assert eval_nice({"A2RL_EVAL_NICE": "0"}) == 0
    for bad in ("20", "-1", "x"):
        with pytest.raises(A2rlError):
            eval_nice({"A2RL_EVAL_NICE": bad})


def test_the_eval_process_runs_niced_with_bounded_threads() -> None:
    env = {**os.environ, "A2RL_EVAL_SANDBOX": "none", "A2RL_EVAL_NICE": "7", "A2RL_EVAL_THREADS": "1"}
    env.pop("OMP_NUM_THREADS", None)
    probe = "import os; print(os.nice(0), os.environ['OMP_NUM_THREADS'])"
    with EvalBox("eval-cpu-share", env=env) as box:
        done = subprocess.run(
            [*box.prefix, sys.executable, "-c", probe],
            env={**env, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            check=True,
        )
        assert "cpu: nice +7, 1 threads" in box.describe()
    assert done.stdout.split() == [str(os.nice(0) + 7), "1"]
