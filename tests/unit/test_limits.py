"""a2rl.limits: memory and process limits hold for real process trees, and nothing is left behind.

The cgroup tests run where this process may create cgroups (root on a cgroup v1/v2 host: CI and
`make test`); the rlimit tests force that mechanism. Every tree is bounded (a fork bomb forks at
most 500 sleeping children that exit by themselves after 10 s) and the host is checked to be left
as found: no `a2rl-limits-test-*` cgroup directory survives a test, passed or failed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2rl.limits import (
    CGROUP_ROOT,
    MECHANISM_CGROUP_V1,
    MECHANISM_CGROUP_V2,
    MECHANISM_RLIMITS,
    Containment,
    Limits,
    LimitsUnavailableError,
    RlimitContainment,
    _own_cgroup,
    contain,
)

NAME = "limits-test"
MIB = 1 << 20
NOBODY = 65534

#: Forks up to 500 children that sleep (10 s at most), prints how many it got and their pids,
#: then waits to be killed (30 s at most).
FORK_BOMB = """
import os, sys, time
pids = []
for _ in range(500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(10)
        os._exit(0)
    pids.append(pid)
print(len(pids), *pids, flush=True)
time.sleep(30)
"""
#: Allocates (and touches) 400 MiB.
ALLOCATE = "b = bytearray(400 * 1024 * 1024); print('allocated', len(b))"


def _leftovers() -> list[Path]:
    """Our test cgroups anywhere under the cgroup mount (at most three levels deep)."""
    found: list[Path] = []
    for pattern in ("*/a2rl-limits-test-*", "*/*/a2rl-limits-test-*", "*/*/*/a2rl-limits-test-*"):
        found += CGROUP_ROOT.glob(pattern)
    return found


@pytest.fixture(autouse=True)
def host_left_as_found() -> Iterator[None]:
    before = set(_leftovers())
    yield
    left = [p for p in _leftovers() if p not in before]
    for path in left:  # clean up after a failed test, then fail it
        with contextlib.suppress(OSError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
            time.sleep(0.2)
            path.rmdir()
    assert not left, f"cgroup directories left behind: {left}"


def _system_python() -> str:
    """An interpreter an unprivileged uid can run (the venv may live under root's home)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another uid")
    found = shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin")
    if found is None or os.stat(found).st_mode & 0o001 == 0:
        pytest.skip("no system python3 that another uid may run")
    return found


def _cgroup_box(limits: Limits) -> Containment:
    box = contain(NAME, limits)
    if box.mechanism == MECHANISM_RLIMITS:
        box.close()
        pytest.skip("no writable cgroup hierarchy here (only rlimits)")
    return box


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    """True once `pid` no longer runs (absent, or a zombie waiting for its reaper)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _run(box: Containment, code: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=box.preexec,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def _bomb(
    box: Containment, preexec: object = None, python: str = sys.executable
) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen(
        [python, "-c", FORK_BOMB],
        preexec_fn=preexec or box.preexec,  # type: ignore[arg-type]  # noqa: PLW1509
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first, "the fork bomb printed nothing"
    return proc, [int(p) for p in first[1:]]


# --- cgroups ------------------------------------------------------------------------------------


def test_cgroup_memory_limit_kills_the_tree_and_says_memory() -> None:
    with _cgroup_box(Limits(memory_bytes=100 * MIB)) as box:
        done = _run(box, ALLOCATE)
        assert done.returncode == -9, done  # the OOM killer, not a Python MemoryError
        assert "allocated" not in done.stdout
        assert box.exceeded() == "memory"
        used = box.usage()
        assert used.oom_kills and used.oom_kills >= 1
        assert used.peak_memory_bytes is not None and used.peak_memory_bytes <= 100 * MIB


def test_cgroup_within_limits_exceeds_nothing() -> None:
    with _cgroup_box(Limits(memory_bytes=200 * MIB, max_processes=20)) as box:
        done = _run(box, "b = bytearray(20 * 1024 * 1024); print('allocated', len(b))")
        assert done.returncode == 0, done.stderr
        assert box.exceeded() is None
        used = box.usage()
        assert used.peak_memory_bytes is not None and 20 * MIB <= used.peak_memory_bytes <= 200 * MIB


def test_cgroup_fork_bomb_is_held_at_max_processes_and_close_kills_it() -> None:
    box = _cgroup_box(Limits(max_processes=30))
    try:
        proc, children = _bomb(box)
        assert len(children) <= 29  # the bomb itself is the 30th task
        assert box.exceeded() == "processes"
        used = box.usage()
        assert used.process_refusals and used.process_refusals >= 1
        if used.peak_processes is not None:
            assert used.peak_processes <= 30
    finally:
        box.close()
    assert proc.wait(timeout=10) == -9
    assert all(_gone(pid) for pid in children)
    assert not any(d.exists() for d in box.dirs)  # type: ignore[attr-defined]
    box.close()  # idempotent


def test_cgroup_preexec_joins_then_runs_as_an_unprivileged_user() -> None:
    python = _system_python()
    with _cgroup_box(Limits(max_processes=10)) as box:
        done = subprocess.run(
            [
                python,
                "-c",
                "import os; print(os.getuid(), os.getgid()); print(open('/proc/self/cgroup').read())",
            ],
            preexec_fn=box.preexec_fn(uid=NOBODY, gid=NOBODY),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        ids, cgroups = done.stdout.split("\n", 1)
        assert ids.split() == [str(NOBODY), str(NOBODY)]
        for d in box.dirs:  # type: ignore[attr-defined]
            assert d.name in cgroups


def test_cgroup_close_kills_a_tree_that_left_its_process_group() -> None:
    """A process that double-forked into its own session is out of reach of killpg, not of close()."""
    escape = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(30); os._exit(0)\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
    )
    with _cgroup_box(Limits(max_processes=10)) as box:
        parent = subprocess.Popen(
            [sys.executable, "-c", escape],
            preexec_fn=box.preexec,  # noqa: PLW1509
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert parent.wait(timeout=10) == 0
        left = {int(p) for d in box.dirs for p in (d / "cgroup.procs").read_text().split()}  # type: ignore[attr-defined]
        assert left, "the escaped grandchild should still be in the cgroup"
    assert all(_gone(pid) for pid in left)


# --- rlimits (forced) ---------------------------------------------------------------------------


def test_rlimit_memory_makes_a_large_allocation_fail() -> None:
    with contain(NAME, Limits(memory_bytes=200 * MIB), mechanism=MECHANISM_RLIMITS) as box:
        assert isinstance(box, RlimitContainment)
        done = _run(box, ALLOCATE)
        assert done.returncode == 1
        assert "MemoryError" in done.stderr
        assert box.exceeded() is None  # rlimits keep no account: the caller sees the failure


def test_rlimit_memory_leaves_room_for_torch_and_a_tiny_model(tiny_model: Path) -> None:
    """RLIMIT_DATA at 1.5 GiB: torch imports and a tiny model generates (RLIMIT_AS at that value
    breaks `import torch`: its libraries alone map more address space than that)."""
    code = (
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "out = m.generate(**t(['1+1='], return_tensors='pt'), max_new_tokens=4, do_sample=False)\n"
        "print('generated', out.shape[1])\n"
    )
    with contain(NAME, Limits(memory_bytes=1536 * MIB), mechanism=MECHANISM_RLIMITS) as box:
        done = subprocess.run(
            [sys.executable, "-c", code, str(tiny_model)],
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "generated" in done.stdout


def test_rlimit_fork_bomb_is_held_under_a_dedicated_uid() -> None:
    """RLIMIT_NPROC counts the processes of the real uid (root is exempt): run the tree as nobody."""
    python = _system_python()
    with contain(NAME, Limits(max_processes=20), mechanism=MECHANISM_RLIMITS) as box:
        proc, children = _bomb(box, box.preexec_fn(uid=NOBODY, gid=NOBODY), python)
        try:
            assert len(children) <= 19
        finally:
            for pid in (*children, proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            proc.wait(timeout=10)
    assert all(_gone(pid) for pid in children)


def test_rlimit_file_size_stops_a_large_write(tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    code = f"open({str(target)!r}, 'wb').write(b'x' * (8 * 1024 * 1024))"
    with contain(NAME, Limits(file_size_bytes=1 * MIB), mechanism=MECHANISM_RLIMITS) as box:
        done = _run(box, code)
    assert done.returncode != 0
    assert "File too large" in done.stderr
    assert target.stat().st_size <= 1 * MIB


def test_rlimits_never_raise_a_hard_limit() -> None:
    """A hard limit already lower than asked for stays (raising it needs CAP_SYS_RESOURCE)."""
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_CPU))"

    def lower_then_contain() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (50, 50))

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "from a2rl.limits import contain, Limits\n"
            "box = contain('limits-test', Limits(cpu_seconds=500), mechanism='rlimits')\n"
            f"subprocess.run([sys.executable, '-c', {code!r}], preexec_fn=box.preexec, check=True)\n",
        ],
        preexec_fn=lower_then_contain,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(50, 50)"


# --- choosing a mechanism -----------------------------------------------------------------------


def test_contain_picks_the_best_available_mechanism() -> None:
    with contain(NAME, Limits(memory_bytes=64 * MIB)) as box:
        assert box.mechanism in (MECHANISM_CGROUP_V2, MECHANISM_CGROUP_V1, MECHANISM_RLIMITS)
        assert box.describe().startswith(f"mechanism {box.mechanism}, memory 0.1 GiB")


def test_an_unknown_or_unavailable_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown limits mechanism"):
        contain(NAME, Limits(), mechanism="cgroup-v3")
    if not os.access(CGROUP_ROOT, os.W_OK) or not (CGROUP_ROOT / "unified" / "cgroup.controllers").exists():
        return
    controllers = (CGROUP_ROOT / "unified" / "cgroup.controllers").read_text().split()
    if "memory" not in controllers:  # the hybrid host these tests run on: v2 has no controllers
        with pytest.raises(LimitsUnavailableError, match="memory and pids"):
            contain(NAME, Limits(), mechanism=MECHANISM_CGROUP_V2)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="memory_bytes must be positive"):
        Limits(memory_bytes=0)


def test_own_cgroup_is_read_from_proc_self_cgroup() -> None:
    hybrid = "9:systemd:/\n8:pids:/\n4:memory:/process_api/ab12\n1:cpu,cpuacct:/x\n0::/\n"
    assert _own_cgroup("memory", hybrid) == "/process_api/ab12"
    assert _own_cgroup("pids", hybrid) == "/"
    assert _own_cgroup("cpuacct", hybrid) == "/x"
    assert _own_cgroup("", hybrid) == "/"
    assert _own_cgroup("", "0::/user.slice/user-1000.slice/session-2.scope\n") == (
        "/user.slice/user-1000.slice/session-2.scope"
    )
    assert _own_cgroup("memory", "0::/\n") is None
