"""A hostile agent against `a2rl run` in the local sandbox (the default).

The agent is told where the held-out data and the store are on the host (an attacker who knows
the layout) and tries every trick of issue 10 from inside its workspace: read them, read other
processes' environments, swap `code/`, a model subdirectory and `run_meta.json` for links to
the held-out data, submit a FIFO, leave a process that changes its session and process group
every millisecond. Afterwards no held-out byte is in the store, nothing of the agent is alive,
and only the honest submission is scored. (Rewrites by an agent run with `--no-sandbox`:
tests/e2e/test_integrity_e2e.py.)
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from a2rl_runner import procs
from a2rl_runner.run import RunOutcome, run_benchrun
from a2rl_tasks import get_task
from a2rl_tasks.staging import stage_cached

from a2rl import paths
from a2rl.api.benchrun import BenchRun
from tests.support.run_support import arith_spec

pytestmark = pytest.mark.slow

HOSTILE = textwrap.dedent(
    """
    import json, os, shutil, subprocess, sys, time, urllib.error, urllib.request
    ws = os.environ["WORKSPACE"]
    heldouts = json.loads(os.environ["HELDOUTS"])
    url = os.environ["GRADING_SERVER_URL"]

    def report(key, value):
        print("HOSTILE " + json.dumps({key: value}), flush=True)

    def submit(path):
        req = urllib.request.Request(url + "/submit", data=json.dumps({"model_path": path}).encode(),
                                     headers={"Content-Type": "application/json"})
        t = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.load(r), round(time.monotonic() - t, 2)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e), round(time.monotonic() - t, 2)

    report("sees_heldout", [h for h in heldouts if os.path.exists(h)])
    report("sees_store", os.path.exists(os.environ["STORE"]))
    report("sees_cache", os.path.exists(os.environ["CACHE"]))
    environs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environs.append(open(f"/proc/{pid}/environ", "rb").read())
        except OSError:
            pass
    report("store_keys_in_proc", any(b"A2RL_STORE" in e or b"A2RL_HELDOUT" in e for e in environs))
    # The runner's secrets, under the names they really have.
    report("secrets_in_env", sorted(set(json.loads(os.environ["RUNNER_SECRETS"])) & set(os.environ)))
    # Host root's moves: a crash handler in kernel.core_pattern (opening it is the test: nothing
    # is written), a root-only private key, the host's accounts.
    def opened_for_writing(path):
        try:
            os.close(os.open(path, os.O_WRONLY))
            return "opened"
        except OSError as exc:
            return type(exc).__name__
    report("core_pattern", opened_for_writing("/proc/sys/kernel/core_pattern"))
    report("uid", os.getuid())
    report("snakeoil", os.path.exists("/etc/ssl/private/ssl-cert-snakeoil.key"))
    report("shadow", os.path.exists("/etc/shadow"))
    target = heldouts[0]

    # code/ becomes a link to the held-out data; so does run_meta.json.
    shutil.rmtree("code")
    os.symlink(target, "code")
    os.unlink("run_meta.json")
    os.symlink(os.path.join(target, "heldout.jsonl"), "run_meta.json")

    base = os.environ["MODEL_PATH"]
    shutil.copytree(base, "output/linked")
    os.chmod("output/linked", 0o755)  # copied read-only from the base model
    os.symlink(target, "output/linked/extra")
    report("linked", submit("output/linked"))
    shutil.copytree(base, "output/fifo")
    os.chmod("output/fifo", 0o755)
    os.mkfifo("output/fifo/weights.bin")
    report("fifo", submit("output/fifo"))
    shutil.copytree(base, "output/honest")
    report("honest", submit("output/honest"))

    # A leftover that changes session and process group every millisecond.
    subprocess.Popen([sys.executable, "-c", os.environ["FORKER"]])
    print("hostile agent done", flush=True)
    """
)

FORKER = (
    "import os, time\nos.setsid()\nwhile True:\n    if os.fork():\n        os._exit(0)\n"
    "    os.setpgid(0, 0)\n    time.sleep(0.001)\n"
)


def _heldout_dirs() -> list[str]:
    """The held-out split this run uses first, then every other one in the data cache."""
    used = str(stage_cached(get_task("arith"), 0).heldout_dir)
    others = sorted(str(p) for p in (paths.data_cache() / "arith").glob("*/heldout"))
    return [used, *(o for o in others if o != used)]


def _lines(text: str, tag: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for line in text.splitlines():
        if f"{tag} " in line and line.split(f"{tag} ", 1)[1].startswith("{"):
            found.update(json.loads(line.split(f"{tag} ", 1)[1]))
    return found


def _run(
    tmp_path: Path, store: Path, agent_code: str, name: str, env: dict[str, str], *, sandbox: bool = True
) -> RunOutcome:
    agent = tmp_path / "agent.py"
    agent.write_text(agent_code)
    spec = arith_spec(agent, wall_s=60, grace_s=2)
    spec["agent"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    run = BenchRun.model_validate({"metadata": {"name": name}, "spec": spec})
    return run_benchrun(run, store_uri=str(store), progress=True, sandbox=sandbox)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-store")


def test_a_hostile_agent_in_the_sandbox_gets_nothing(
    tmp_path: Path, store_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    heldouts = _heldout_dirs()
    runner_secrets = {
        "TOGETHER_API_KEY": "tgp_v1_Xb4kR9mQ2wLz7TnVc5Hs8JdYf1Ga6Ue3Po0iKqMrNt",
        "HF_TOKEN": "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",
        "GITHUB_TOKEN": "ghp_4fK9sLm2QxV7bN1cR8tY3wZ6pJ0hGdE5uAi",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    }
    for name, value in runner_secrets.items():
        monkeypatch.setenv(name, value)
    env = {
        "RUNNER_SECRETS": json.dumps(list(runner_secrets)),
        "HELDOUTS": json.dumps(heldouts),
        "STORE": str(store_dir),
        "CACHE": str(paths.cache_dir()),
        "FORKER": FORKER,
    }
    outcome = _run(tmp_path, store_dir, HOSTILE, "hostile", env)
    out = capsys.readouterr().out
    assert "hostile agent done" in out, out[-3000:]
    seen = _lines(out, "HOSTILE")
    assert seen["sees_heldout"] == [] and seen["sees_store"] is False and seen["sees_cache"] is False
    assert seen["store_keys_in_proc"] is False
    assert seen["secrets_in_env"] == []  # the environment is an allow-list, not a filter
    assert seen["core_pattern"] in ("PermissionError", "OSError") and seen["uid"] != 0
    assert seen["snakeoil"] is False and seen["shadow"] is False
    assert not any(v.encode() in (store_dir / outcome.prefix / "logs" / "agent.log").read_bytes()
                   for v in runner_secrets.values())  # fmt: skip

    status, body, _ = seen["linked"]
    assert status == 400 and "output/linked/extra" in body["error"], body
    status, body, seconds = seen["fifo"]
    assert status == 400 and "output/fifo/weights.bin" in body["error"], body
    assert seconds < 10
    status, body, _ = seen["honest"]
    assert status == 200 and body["submission_id"] == 1, body

    # Not one held-out line in any object of the store (blobs, revisions, logs, reports).
    secrets = {line for h in heldouts for line in Path(h, "heldout.jsonl").read_bytes().splitlines() if line}
    run_dir = store_dir / outcome.prefix
    for obj in store_dir.rglob("*"):
        if obj.is_file() and obj.stat().st_size:
            data = obj.read_bytes()
            leaked = [s for s in secrets if s in data]
            assert not leaked, f"held-out bytes in {obj}"
    # run_meta.json was not written through the link: the held-out file is unchanged and the
    # workspace's run_meta.json is the recorder's again (or the agent's link, never its target).
    for h in heldouts:
        assert b"start_time" not in Path(h, "heldout.jsonl").read_bytes()

    # Exactly one scored submission; nothing of the agent alive.
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["sandbox"].startswith("bubblewrap")
    assert outcome.scores.submissions == 1 and outcome.scores.valid_submissions == 1
    session_alive = [
        p for p in procs.snapshot().values() if not p.zombie and procs.env_has(p.pid, "STORE", str(store_dir))
    ]
    assert session_alive == []
