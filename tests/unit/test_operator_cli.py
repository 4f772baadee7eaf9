"""`a2rl operator`: user mistakes are one line, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def a2rl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "a2rl"
    return subprocess.run([str(exe), *args], check=False, capture_output=True, text=True, timeout=60, env=env)


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    out = a2rl("operator", "--kubeconfig", str(tmp_path / "nope"))
    assert out.returncode == 2
    assert out.stderr.strip() == f"a2rl: error: {tmp_path / 'nope'}: no such kubeconfig"


def test_bad_egress_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    out = a2rl("operator", "--kubeconfig", str(kubeconfig), "--store-egress", "minio.example.com:9000")
    assert out.returncode == 2
    assert "egress 'minio.example.com:9000': expected CIDR[:PORT]" in out.stderr
    assert "Traceback" not in out.stderr


def _kubeconfig(tmp_path: Path) -> Path:
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    return kubeconfig


def test_bad_health_address_is_one_line(tmp_path: Path) -> None:
    out = a2rl(
        "operator", "--kubeconfig", str(_kubeconfig(tmp_path)), "--health", "http://0.0.0.0:8080/healthz"
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "a2rl: error: --health 'http://0.0.0.0:8080/healthz': expected HOST:PORT"


def test_bad_pod_defaults_are_one_line(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "A2RL_POD_DEFAULTS": '{"eval": {"nodeSelektor": {}}}'}
    out = a2rl("operator", "--kubeconfig", str(_kubeconfig(tmp_path)), env=env)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "a2rl: error: A2RL_POD_DEFAULTS/A2RL_IMAGE_PULL_SECRETS: "
        "eval.nodeSelektor: Extra inputs are not permitted"
    )


def test_a_bad_queueing_limit_is_one_line(tmp_path: Path) -> None:
    import os

    kubeconfig = str(_kubeconfig(tmp_path))
    out = a2rl("operator", "--kubeconfig", kubeconfig, "--queue-timeout", "0")
    assert out.returncode == 2
    assert out.stderr.strip() == "a2rl: error: --queue-timeout: a number of seconds above 0 (got 0)"
    out = a2rl("operator", "--kubeconfig", kubeconfig, env={**os.environ, "A2RL_QUEUE_TIMEOUT": "soon"})
    assert out.returncode == 2
    assert out.stderr.strip() == "a2rl: error: A2RL_QUEUE_TIMEOUT: a number of seconds above 0 (got 'soon')"
