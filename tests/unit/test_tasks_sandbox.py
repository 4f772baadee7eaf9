"""The code-execution sandbox: every hostile completion fails alone, nothing escapes."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest
from a2rl_tasks.sandbox import Limits, isolation, run_program, run_programs

FAST = Limits(timeout_s=3.0)


def test_isolation_is_probed() -> None:
    iso = isolation()
    assert Path(iso.python).exists()
    if os.geteuid() == 0:
        assert iso.uid == 65534


def test_correct_program_passes_and_wrong_fails() -> None:
    ok = run_program("def f(x):\n    return x + 1\nassert f(1) == 2\n", FAST)
    bad = run_program("def f(x):\n    return x\nassert f(1) == 2\n", FAST)
    assert ok.passed and ok.status == "passed"
    assert not bad.passed and bad.status == "failed"
    assert "AssertionError" in bad.output_tail


def test_infinite_loop_times_out() -> None:
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", Limits(timeout_s=1.5))
    assert r.status == "timeout" and not r.passed
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(
    "exit_code",
    [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "raise SystemExit\n",
        "import sys\nsys.exit()\n",
    ],
)
def test_exiting_before_the_tests_is_a_failure(exit_code: str) -> None:
    program = exit_code + "assert False, 'the tests never ran'\n"
    r = run_program(program, FAST)
    assert not r.passed
    assert r.status == "exited_early"


def test_fork_bomb_fails_alone_and_leaves_nothing() -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = run_program(bomb, Limits(timeout_s=2.0))
    assert not r.passed
    # Other programs still run fine right after.
    assert run_program("assert sum(range(10)) == 45\n", FAST).passed
    if isolation().uid is not None:
        # The kernel tears the PID namespace down asynchronously: give it a few seconds.
        deadline = time.monotonic() + 10
        while _sandbox_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _sandbox_processes() == []


def _sandbox_processes() -> list[Path]:
    return [p for p in Path("/proc").iterdir() if p.name.isdigit() and _uid_of(p) == isolation().uid]


def _uid_of(proc_dir: Path) -> int | None:
    try:
        for line in (proc_dir / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_detached_children_are_killed_with_the_program(tmp_path: Path) -> None:
    # A child that leaves the process group and outlives the program must not survive it.
    marker = tmp_path / "alive"
    tmp_path.chmod(0o777)
    program = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(2)\n"
        f"    open({str(marker)!r}, 'w').write('x')\n"
        "    os._exit(0)\n"
    )
    assert run_program(program, FAST).passed
    time.sleep(3)
    if isolation().pid_namespace:
        assert not marker.exists()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="file protection comes from dropping root to an unprivileged uid"
)
@pytest.mark.parametrize(
    "attack",
    [
        "import os\nos.remove({path!r})\n",
        "import shutil\nshutil.rmtree({dir!r})\n",
        "open({path!r}, 'w').write('overwritten')\n",
    ],
)
def test_files_outside_the_sandbox_survive(tmp_path: Path, attack: str) -> None:
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim_dir.chmod(0o755)
    tmp_path.chmod(0o755)
    victim = victim_dir / "precious.txt"
    victim.write_text("keep me")
    victim.chmod(0o644)
    r = run_program(attack.format(path=str(victim), dir=str(victim_dir)), FAST)
    assert not r.passed
    assert victim.read_text() == "keep me"


def test_no_network() -> None:
    if not isolation().net_namespace:
        pytest.skip("unshare is not usable here: no network isolation (documented fallback)")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        program = (
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "s.sendall(b'leak')\n"
        )
        r = run_program(program, FAST)
        outside = run_program("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n", FAST)
    finally:
        stop.set()
        t.join(2)
        server.close()
    assert not r.passed and not outside.passed
    assert accepted == []


def test_memory_hog_fails() -> None:
    hog = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 2**20))\n"
    r = run_program(hog, Limits(timeout_s=10.0, memory_bytes=512 << 20))
    assert not r.passed
    assert r.status == "failed"
    assert "MemoryError" in r.output_tail


def test_run_programs_keeps_order_and_isolates_failures() -> None:
    sources = ["assert True\n", "while True: pass\n", "assert 1 == 2\n", "x = 1\n"]
    results = run_programs(sources, Limits(timeout_s=2.0), workers=4)
    assert [r.status for r in results] == ["passed", "timeout", "failed", "passed"]


def test_working_directory_is_fresh_and_private() -> None:
    writer = (
        "open('left_behind.txt', 'w').write('x')\n"
        "import os\n"
        "assert sorted(os.listdir('.')) == ['left_behind.txt', 'program.py']\n"
    )
    assert run_program(writer, FAST).passed
    reader = "import os\nassert 'left_behind.txt' not in os.listdir('.')\n"
    assert run_program(reader, FAST).passed
