"""The eval process runs in a sandbox of its own, within limits, and refuses oversized models
before allocating them.

Hostile submissions are what an agent would write: a 44 KB directory whose config.json has
Llama-3-70B's values, a safetensors header that claims terabytes, a GPT-2 config with a huge
learned position table, a real model evaluated under a memory limit it does not fit, an eval
process that hangs after a child of it left its process group. The eval processes are the real
ones (`LocalDispatcher` → `a2rl eval submission`), in the real sandbox.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2rl_grader.baseline import baseline_submission_manifest
from a2rl_grader.bound import (
    ParameterBound,
    SubmissionRefusedError,
    check_parameter_bound,
    config_parameters,
    estimate_parameters,
    format_params,
)
from a2rl_grader.evaluate import derive_bound
from a2rl_grader.sandbox import baseline_box, submission_box
from a2rl_recorder.dispatch import LocalDispatcher
from a2rl_tasks.base import StagedData

from a2rl.constants import ENV_EVAL_MEMORY_BYTES
from a2rl.eval_sandbox import find_bwrap, store_binds
from a2rl.eval_view import eval_readable
from a2rl.local_keys import keys_dir
from a2rl.records.tree import TreeRecord
from a2rl.store.cas import snapshot_tree
from a2rl.store.local import LocalStore
from tests.support.recorder_support import LAYOUT, PREFIX
from tests.support.shared_fixtures import writable_copy

#: meta-llama/Meta-Llama-3-70B config.json (the values that size the model).
LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
NEEDS_BWRAP = pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap cannot create namespaces here")


def _safetensors(path: Path, tensors: dict[str, list[int]], data: bytes = b"") -> None:
    header = {
        name: {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}
        for name, shape in tensors.items()
    }
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def _hostile_70b(tiny_model: Path, dest: Path) -> Path:
    """The agent's 44 KB submission: the tiny model's tokenizer, a config shaped like Llama-3-70B."""
    dest.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(tiny_model / name, dest / name)
    (dest / "config.json").write_text(json.dumps(LLAMA3_70B, indent=2))
    return dest


def _record(store: LocalStore, index: int, model: Path) -> None:
    """What the runner and the recorder record: submission 0 (the base model, its config.json
    stored) and submission `index`'s snapshot."""
    tree, _ = snapshot_tree(store, LAYOUT, model)
    if index == 0:
        manifest = baseline_submission_manifest(TreeRecord.of(tree), tree.digest, "tiny").to_json()
    else:
        manifest = {
            "index": index,
            "submitted_at": "2026-05-01T12:00:00Z",
            "model_path": f"output/v{index}",
            "model": tree.to_json(),
            "model_digest": tree.digest,
            "identical_to_base": False,
            "request": {"model_path": f"output/v{index}"},
        }
    store.put_json(LAYOUT.submission_manifest(index), manifest)


def _dispatcher(store: LocalStore, heldout: Path, **kwargs: object) -> LocalDispatcher:
    return LocalDispatcher(
        store,
        LAYOUT,
        task="arith",
        heldout=heldout,
        backend="transformers",
        limit=2,
        **kwargs,  # type: ignore[arg-type]
    )


def _eval_log(store: LocalStore, index: int) -> str:
    return store.get_bytes(LAYOUT.log(f"eval-{index:05d}")).decode()


def _peak_mib(log: str) -> float | None:
    found = re.search(r"eval usage: peak memory (\d+) MiB", log)
    return float(found.group(1)) if found else None


# --- the parameter estimate and the bound (pure) -------------------------------------------------


def test_llama3_70b_config_is_estimated_at_70b() -> None:
    assert format_params(config_parameters(LLAMA3_70B) or 0) == "70.6B"


def test_the_tiny_model_is_estimated_to_within_one_percent(tiny_model: Path) -> None:
    real = json.loads((tiny_model / "a2rl-model.json").read_text())["n_parameters"]
    estimate = estimate_parameters(tiny_model)
    assert estimate.from_weights == real  # safetensors shapes are exact
    assert estimate.from_config is not None and abs(estimate.from_config - real) / real < 0.01


def test_the_bound_is_4x_the_base_or_the_base_plus_1b() -> None:
    assert ParameterBound(300_000_000).limit == 1_300_000_000
    assert ParameterBound(8_000_000_000).limit == 32_000_000_000
    assert ParameterBound(8_000_000_000).describe() == "32.0B (4x the base model)"


def test_a_huge_learned_position_table_is_counted(tmp_path: Path) -> None:
    """GPT-2 allocates n_positions x n_embd for its position embeddings: a 10^9-token context."""
    model = tmp_path / "gpt2"
    model.mkdir()
    config = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    (model / "config.json").write_text(json.dumps({**config, "n_positions": 1_000_000_000}))
    with pytest.raises(SubmissionRefusedError, match=r"config asks for ~768\.\dB parameters"):
        check_parameter_bound(model, ParameterBound(124_000_000))


def test_a_safetensors_header_claiming_huge_tensors_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    model = writable_copy(tiny_model, tmp_path / "model")
    _safetensors(model / "model.safetensors", {"model.embed_tokens.weight": [2_000_000, 1_000_000]})
    assert (model / "model.safetensors").stat().st_size < 200
    with pytest.raises(SubmissionRefusedError) as refused:
        check_parameter_bound(model, ParameterBound(3_600_000))
    assert str(refused.value) == (
        "submission refused: weight files declare ~2.0T parameters, the bound is 1.0B "
        "(the base model's 3.6M + 1.0B)"
    )


def test_a_safetensors_header_length_past_the_file_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    model = writable_copy(tiny_model, tmp_path / "model")
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(
        SubmissionRefusedError, match=r"model\.safetensors declares a .*-byte safetensors header"
    ):
        check_parameter_bound(model, ParameterBound(3_600_000))


def test_an_unreadable_architecture_without_weights_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "custom", "width": 10**6}))
    with pytest.raises(SubmissionRefusedError, match="its size cannot be estimated"):
        check_parameter_bound(tmp_path, ParameterBound(3_600_000))


def test_the_bound_comes_from_the_recorded_base_model(tiny_model: Path, tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    assert derive_bound(store, LAYOUT) is None
    _record(store, 0, tiny_model)
    bound = derive_bound(store, LAYOUT)
    assert bound is not None and abs(bound.base_parameters - 3_641_856) < 50_000


# --- the sandbox ---------------------------------------------------------------------------------


def test_store_binds_leave_only_the_named_keys_writable(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for key in (
        "local/test-run-0123456789ab/blobs",
        "local/other-run-1/submissions",
        "baselines/arith",
        "models",
    ):
        (root / key).mkdir(parents=True)
    argv = store_binds(root, [PREFIX])
    assert argv[:3] == ["--bind", str(root), str(root)]
    read_only = {argv[i + 1] for i in range(3, len(argv), 3) if argv[i] == "--ro-bind"}
    assert read_only == {str(root / "local/other-run-1"), str(root / "baselines"), str(root / "models")}


def test_the_eval_view_is_the_toolchain_and_what_the_launcher_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hugging Face snapshot as the base model: its files are links into the cache's blobs."""
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    blob = tmp_path / "hub" / "blobs" / "4f2a"
    blob.parent.mkdir(parents=True)
    blob.write_text("weights")
    snapshot = tmp_path / "hub" / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to("../../blobs/4f2a")
    # A home whose link leads to a file outside it: named, the home is too wide and is not walked.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / "id_ed25519").symlink_to(tmp_path / "ssh" / "id_ed25519")
    env = {"HF_HOME": str(tmp_path / "hf"), "LD_LIBRARY_PATH": f"/:{tmp_path / 'lib'}:lib"}
    readable = eval_readable([snapshot, Path.home()], env=env)
    assert {snapshot, blob, tmp_path / "hf", tmp_path / "lib", Path(sys.prefix)} <= set(readable)
    assert Path("/") not in readable and home not in readable  # too wide: left out
    key = tmp_path / "ssh" / "id_ed25519"
    assert not [p for p in readable if p == key or p in key.parents]
    assert not [p for p in readable if p == keys_dir() or p in keys_dir().parents]  # nor above them
    assert tmp_path / "cache" / "data" not in readable and tmp_path / "cache" / "models" not in readable


_PROBE = """
import json, os, socket, sys
out = {"interfaces": [name for _, name in socket.if_nameindex()], "uid": os.getuid()}
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    out["connect"] = "connected"
except OSError as exc:
    out["connect"] = type(exc).__name__
for name, path in (("own", sys.argv[2]), ("other", sys.argv[3]), ("home", sys.argv[4])):
    try:
        with open(os.path.join(path, "planted.txt"), "w") as f:
            f.write("x")
        out[name] = "written"
    except OSError as exc:
        out[name] = exc.strerror
out["keys"] = sorted(os.listdir(sys.argv[5])) if os.path.isdir(sys.argv[5]) else None
# A generated program's move as host root: a crash handler in kernel.core_pattern, any sysctl.
# Opening for writing is the test: nothing is written.
def opened(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
        return "opened"
    except OSError as exc:
        return type(exc).__name__
out["core_pattern"] = opened("/proc/sys/kernel/core_pattern")
out["sysrq"] = opened("/proc/sysrq-trigger")
sysctls = [os.path.join(d, f) for d, _, fs in os.walk("/proc/sys") for f in fs]
out["sysctls"] = len(sysctls)
out["sysctls_writable"] = [p for p in sysctls if opened(p) == "opened"]
# What a generated program reads as host root: account hashes, ssh host keys, TLS private keys.
def read(path):
    try:
        with open(path, "rb") as f:
            return f"read {len(f.read())} bytes"
    except OSError as exc:
        return type(exc).__name__
out["etc"] = {p: read(p) for p in json.loads(sys.argv[6])}
print(json.dumps(out))
"""
#: Root-only host files an evaluation's code would go for (those present here are probed).
ROOT_ONLY_ETC = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key",
                 "/etc/ssh/ssh_host_rsa_key", "/etc/ssl/private/ssl-cert-snakeoil.key")  # fmt: skip
#: What an evaluation needs of /etc: the dynamic loader's cache, CA certificates, names.
NEEDED_ETC = ("/etc/ld.so.cache", "/etc/ssl/certs/ca-certificates.crt", "/etc/passwd", "/etc/hosts")


@NEEDS_BWRAP
def test_the_eval_sandbox_has_no_network_and_writes_only_its_run(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    other = tmp_path / "store" / "local" / "other-run-0123"
    other.mkdir(parents=True)
    keys_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []
    server.settimeout(5)
    threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True).start()
    port = server.getsockname()[1]
    try:
        with submission_box(
            1, task="arith", store_uri=store.uri, run_prefix=PREFIX, heldout=tmp_path / "heldout"
        ) as box:
            own = tmp_path / "store" / PREFIX
            secrets_here = [p for p in ROOT_ONLY_ETC if os.path.exists(p)]
            assert secrets_here, "no root-only /etc file to probe on this host"
            probed = json.dumps([*secrets_here, *(p for p in NEEDED_ETC if os.path.exists(p))])
            args = [str(port), str(own), str(other), str(Path.home()), str(keys_dir()), probed]
            done = subprocess.run(
                [*box.prefix, sys.executable, "-c", _PROBE, *args],
                env={**os.environ, **box.env},
                preexec_fn=box.preexec,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["interfaces"] == ["lo"]
    assert seen["connect"] == "ConnectionRefusedError"  # its own loopback: nobody listens there
    assert not accepted or accepted == [None]
    assert seen["own"] == "written"
    assert seen["other"] == "Read-only file system" and not (other / "planted.txt").exists()
    assert seen["home"] in ("Read-only file system", "No such file or directory")
    assert seen["keys"] == []  # the machine keys are hidden from a submission's evaluation
    assert seen["uid"] != 0
    # Host root by its uid when the runner is root: the kernel's settings are read-only all the same.
    assert seen["core_pattern"] in ("OSError", "PermissionError"), seen["core_pattern"]
    assert seen["sysrq"] in ("OSError", "PermissionError", "FileNotFoundError"), seen["sysrq"]
    assert seen["sysctls"] > 100 and seen["sysctls_writable"] == []
    # … and root-only files are not there at all, while what programs need is.
    assert {p: seen["etc"][p] for p in secrets_here} == dict.fromkeys(secrets_here, "FileNotFoundError")
    assert all(r.startswith("read ") for p, r in seen["etc"].items() if p in NEEDED_ETC), seen["etc"]


_READ = """
import json, sys
def read(path):
    try:
        with open(path, "rb") as f:
            return f"read {len(f.read())} bytes"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({p: read(p) for p in sys.argv[1:]}))
"""


def _read(path: Path) -> str:
    try:
        return f"read {len(path.read_bytes())} bytes"
    except OSError as exc:
        return type(exc).__name__


@pytest.fixture
def root_only_secrets() -> Iterator[list[Path]]:
    """Secrets where hosts keep them, readable by their owner only (root, as `make test` runs): an
    ssh key and cloud credentials in the home, a token in a 0700 directory under /tmp (another
    run's scratch, a tool's socket directory), a service's state under /var/lib and /run."""
    token = secrets.token_hex(4)
    home, tmp = Path.home() / f".a2rl-probe-{token}", Path(tempfile.mkdtemp(prefix="a2rl-probe-"))
    services = [Path(d) / f"a2rl-probe-{token}" for d in ("/var/lib", "/run") if os.access(d, os.W_OK)]
    files = [home / ".ssh" / "id_ed25519", home / ".aws" / "credentials", tmp / "token"]
    files += [d / "secret" for d in services]
    try:
        for path in files:
            for directory in reversed(path.parents):
                if not directory.exists():
                    directory.mkdir(mode=0o700)
            path.write_text(f"secret {token}\n")
            path.chmod(0o600)
        yield files
    finally:
        for directory in (home, tmp, *services):
            shutil.rmtree(directory, ignore_errors=True)


@NEEDS_BWRAP
def test_root_only_host_files_are_not_in_the_eval_sandbox(
    root_only_secrets: list[Path], tiny_model: Path, staged_arith: StagedData, tmp_path: Path
) -> None:
    """Under a root launcher the eval process is host root by its uid: it sees none of the host's
    root-only files outside what the evaluation reads, and the evaluation still scores."""
    store = LocalStore(tmp_path / "store")
    _record(store, 0, tiny_model)
    _record(store, 1, tiny_model)
    assert all(_read(p).startswith("read ") for p in root_only_secrets)  # their owner reads them
    heldout = staged_arith.heldout_dir
    needed = sorted(p for p in heldout.rglob("*") if p.is_file())[:1]
    probed = [*root_only_secrets, *needed]
    with submission_box(1, task="arith", store_uri=store.uri, run_prefix=PREFIX, heldout=heldout) as box:
        done = subprocess.run(
            [*box.prefix, sys.executable, "-c", _READ, *map(str, probed)],
            env={**os.environ, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    hidden = {str(p): seen[str(p)] for p in root_only_secrets}
    assert set(hidden.values()) <= {"FileNotFoundError", "PermissionError"}, hidden
    assert needed and all(seen[str(p)].startswith("read ") for p in needed), seen
    result = _dispatcher(store, heldout, timeout_s=300).evaluate(1)  # the submission, the base model
    assert result.error is None and result.score is not None, result.error


@NEEDS_BWRAP
def test_humaneval_programs_still_run_in_the_eval_sandbox(tmp_path: Path) -> None:
    """HumanEval's code sandbox (`a2rl_tasks.sandbox`, its own namespaces inside the box) finds an
    interpreter and its libraries in the allow-list view."""
    store = LocalStore(tmp_path / "store")
    code = (
        "from a2rl_tasks.sandbox import isolation, run_program; "
        "r = run_program('import json; assert sum(range(5)) == 10'); "
        "print(r.status, '|', isolation().describe(), '|', r.output_tail)"
    )
    with submission_box(1, task="humaneval", store_uri=store.uri, run_prefix=PREFIX, heldout=tmp_path) as box:
        done = subprocess.run(
            [*box.prefix, sys.executable, "-c", code],
            env={**os.environ, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("passed | network namespace, pid namespace"), done.stdout


def _accept(server: socket.socket) -> None:
    try:
        conn, _ = server.accept()
    except OSError:
        return None
    conn.close()
    raise AssertionError("the eval sandbox reached a server outside it")


@NEEDS_BWRAP
def test_the_baseline_sandbox_may_write_the_baseline_cache(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    with baseline_box(
        task="arith",
        store_uri=store.uri,
        run_prefix=PREFIX,
        model_dir=tmp_path / "model",
        heldout=tmp_path / "heldout",
    ) as box:
        code = "import sys; open(sys.argv[1], 'w').write('x')"
        target = tmp_path / "store" / "baselines" / "probe.txt"
        done = subprocess.run(
            [*box.prefix, sys.executable, "-c", code, str(target)],
            env={**os.environ, **box.env},
            preexec_fn=box.preexec,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "x"


# --- hostile submissions through the real eval process ------------------------------------------


def test_a_70b_shaped_config_is_refused_quickly_with_bounded_memory(
    tiny_model: Path, staged_arith: StagedData, tmp_path: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    _record(store, 0, tiny_model)
    hostile = _hostile_70b(tiny_model, tmp_path / "output" / "v1")
    assert sum(p.stat().st_size for p in hostile.iterdir()) < 60_000
    _record(store, 1, hostile)
    started = time.monotonic()
    result = _dispatcher(store, staged_arith.heldout_dir, timeout_s=300).evaluate(1)
    elapsed = time.monotonic() - started
    assert result.score is None
    assert result.error == (
        "submission refused: config asks for ~70.6B parameters, the bound is 1.0B "
        "(the base model's 3.6M + 1.0B)"
    )
    log = _eval_log(store, 1)
    peak = _peak_mib(log)
    print(f"refused in {elapsed:.1f} s, eval peak memory {peak} MiB ({log.splitlines()[0]})")
    assert elapsed < 60
    if peak is not None:  # a cgroup measured it (rlimits cannot)
        assert peak < 512, log


def test_a_huge_safetensors_header_is_refused_by_the_eval_process(
    tiny_model: Path, staged_arith: StagedData, tmp_path: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    _record(store, 0, tiny_model)
    hostile = writable_copy(tiny_model, tmp_path / "output" / "v1")
    _safetensors(hostile / "model.safetensors", {"lm_head.weight": [128256, 8192 * 4096]})
    _record(store, 1, hostile)
    result = _dispatcher(store, staged_arith.heldout_dir, timeout_s=300).evaluate(1)
    assert result.error is not None and result.error.startswith(
        "submission refused: weight files declare ~4.3T parameters"
    ), result.error


def test_a_model_over_the_memory_limit_is_ended_and_reported(
    tiny_model: Path, staged_arith: StagedData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real model, evaluated with 300 MiB: torch alone needs more. The run goes on."""
    store = LocalStore(tmp_path / "store")
    _record(store, 0, tiny_model)
    _record(store, 1, tiny_model)
    monkeypatch.setenv(ENV_EVAL_MEMORY_BYTES, str(300 << 20))
    result = _dispatcher(store, staged_arith.heldout_dir, timeout_s=300).evaluate(1)
    assert result.score is None
    assert result.error is not None
    log = _eval_log(store, 1)
    if "mechanism rlimits" in log:  # the process sees MemoryError itself
        assert "MemoryError" in result.error or "exit" in result.error, result.error
    else:
        assert result.error == "evaluation exceeded its memory limit (0.3 GiB)", (result.error, log[-2000:])
    dispatch = store.get_json(LAYOUT.submission_dispatch(1))
    assert dispatch["error"] == result.error


_HANG = """#!/bin/sh
setsid sleep 61.7345 </dev/null >/dev/null 2>&1 &
echo "hanging" >&2
exec sleep 60
"""


def _marker_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def test_a_hung_eval_is_ended_and_reported_and_nothing_survives(
    staged_arith: StagedData, tmp_path: Path
) -> None:
    fake = tmp_path / "hang.sh"
    fake.write_text(_HANG)
    fake.chmod(0o755)
    store = LocalStore(tmp_path / "store")
    started = time.monotonic()
    result = _dispatcher(store, staged_arith.heldout_dir, timeout_s=3, python=str(fake)).evaluate(1)
    try:
        assert result.error == "evaluation timed out after 3 s"
        assert time.monotonic() - started < 30
        deadline = time.monotonic() + 5
        while _marker_processes("61.7345") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marker_processes("61.7345") == []  # the child that left the process group too
        assert "hanging" in _eval_log(store, 1)
    finally:
        for pid in _marker_processes("61.7345"):
            os.kill(pid, 9)
