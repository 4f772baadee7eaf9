"""The pure parts of `make images` (hack/images.py): plan order, cache keys, tags, Dockerfiles."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

from a2rl.stacks import STACKS

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("a2rl_hack_images", ROOT / "hack" / "images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


images = _load()


def _copy_repo(tmp_path: Path) -> Path:
    """The files the plan reads and hashes, copied to a scratch root (so they can be changed)."""
    root = tmp_path / "repo"
    for rel in (
        "images",
        "requirements",
        "a2rl",
        "operator",
        "recorder",
        "gateway",
        "grader",
        "tasks",
        "agents",
        "runner",
        "cli",
    ):
        shutil.copytree(ROOT / rel, root / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for rel in ("pyproject.toml", "README.md", ".dockerignore"):
        shutil.copy(ROOT / rel, root / rel)
    return root


def _keys(root: Path, *, gpu: bool = True) -> dict[str, str]:
    inputs = images.read_inputs(root)
    return images.all_keys(images.plan(inputs, gpu=gpu), inputs)


def test_the_plan_builds_every_dockerfile_after_what_it_is_built_on() -> None:
    plan = images.plan(images.read_inputs(ROOT))
    dockerfiles = {im.dockerfile for im in plan if im.dockerfile}
    assert dockerfiles == {p.relative_to(ROOT).as_posix() for p in ROOT.glob("images/*/Dockerfile")}
    position = {im.key_name: i for i, im in enumerate(plan)}
    names = {im.name: im for im in plan if not im.variant}
    for im in plan:
        for dep in im.deps:
            dep_image = next((i for i in plan if i.key_name == dep), None) or names[dep]
            assert position[dep_image.key_name] < position[im.key_name], (dep, im.key_name)
    order = [im.name for im in plan]
    assert order[:3] == ["debian", "base", "runtime"]
    assert order.index("ml") < order.index("grader") < order.index("agent-claude-code")
    assert order.index("agent-baselines") < order.index("agent-openhands")
    assert order.index("node") < order.index("agent-codex")


def test_a_dependency_cycle_is_one_clear_error() -> None:
    a = images.Image("a", "1", "images/a/Dockerfile", args=(("BASE", "@b"),))
    b = images.Image("b", "1", "images/b/Dockerfile", args=(("BASE", "@a"),))
    with pytest.raises(images.BuildError, match="depend on each other"):
        images._ordered([a, b])


def test_gpu_variants_come_with_a_vllm_pin_and_build_on_the_gpu_ml_image(tmp_path: Path) -> None:
    inputs = images.read_inputs(ROOT)
    inputs.lock_pins = {k: v for k, v in inputs.lock_pins.items() if k != "vllm"}
    assert not [im for im in images.plan(inputs) if im.variant]
    inputs.lock_pins["vllm"] = "0.31.0"
    plan = images.plan(inputs)
    gpu = {im.name: im for im in plan if im.variant == "gpu"}
    assert set(gpu) == {"ml", "grader", "agent-baselines"}
    assert gpu["ml"].tag == f"{inputs.version}-gpu" and ("EXTRAS", "gpu") in gpu["ml"].args
    assert dict(images.resolve_args(gpu["grader"], plan))["ML"] == f"ghcr.io/a2rl/ml:{inputs.version}-gpu"
    cpu_grader = next(im for im in plan if im.name == "grader" and not im.variant)
    assert dict(images.resolve_args(cpu_grader, plan))["ML"] == f"ghcr.io/a2rl/ml:{inputs.version}"
    assert not images.plan(inputs, gpu=False)[-1].variant
    assert not [im for im in images.plan(inputs, gpu=False) if im.variant]


def test_keys_change_with_the_lock_and_only_above_it(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    before = _keys(root)
    assert before == _keys(root)  # deterministic
    lock = root / "requirements/lock.txt"
    lock.write_text(lock.read_text() + "# changed\n")
    after = _keys(root)
    changed = {k for k in before if before[k] != after[k]}
    unchanged = {k for k in before if before[k] == after[k]}
    assert {"runtime:0.1.0", "operator:0.1.0", "ml:0.1.0", "grader:0.1.0", "agent-codex:0.169.0"} <= changed
    assert {"debian:bookworm", "base:0.1.0", f"node:{images.read_inputs(root).node_version}"} <= unchanged


def test_keys_change_with_a_dockerfile_and_what_is_built_on_it(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    before = _keys(root)
    grader = root / "images/grader/Dockerfile"
    grader.write_text(grader.read_text().replace('CMD ["a2rl", "--help"]', 'CMD ["a2rl", "eval", "--help"]'))
    after = _keys(root)
    # The grader alone (both variants where the lock pins vllm: one Dockerfile).
    assert {k for k in before if before[k] != after[k]} == {k for k in before if k.startswith("grader:")}
    assert "grader:0.1.0" in before
    base = root / "images/base/Dockerfile"
    base.write_text(base.read_text() + "# changed\n")
    again = _keys(root)
    assert {k for k in after if after[k] == again[k]} == {"debian:bookworm"}


def test_keys_follow_the_source_the_dockerfiles_copy_but_not_what_dockerignore_drops(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    before = _keys(root)
    (root / "operator/a2rl_operator/__pycache__").mkdir(exist_ok=True)
    (root / "operator/a2rl_operator/__pycache__/x.cpython-311.pyc").write_bytes(b"junk")
    assert _keys(root) == before
    source = root / "operator/a2rl_operator/__init__.py"
    source.write_text(source.read_text() + "\n# changed\n")
    after = _keys(root)
    changed = {k for k in before if before[k] != after[k]}
    assert "runtime:0.1.0" in changed and "ml:0.1.0" in changed
    assert {"debian:bookworm", "base:0.1.0"}.isdisjoint(changed)


def test_tags_follow_the_registry_and_the_stack_versions() -> None:
    plan = images.plan(images.read_inputs(ROOT))
    by_name = {im.name: im for im in plan if not im.variant}
    assert by_name["operator"].ref() == "ghcr.io/a2rl/operator:0.1.0"
    assert (
        by_name["operator"].ref("registry.example:5000/a2rl/") == "registry.example:5000/a2rl/operator:0.1.0"
    )
    assert by_name["debian"].ref("registry.example:5000") == "localhost/a2rl/debian:bookworm"
    for name, sdef in STACKS.items():
        assert by_name[f"agent-{name}"].ref() == sdef.image()
    push = images.push_argv(by_name["grader"], "reg.example/a2rl", Path("/tmp/d"))
    assert push == ["podman", "push", "--digestfile", "/tmp/d", "reg.example/a2rl/grader:0.1.0"]


def test_build_and_check_commands(tmp_path: Path) -> None:
    plan = images.plan(images.read_inputs(ROOT))
    by_name = {im.name: im for im in plan if not im.variant}
    argv = images.build_argv(by_name["ml"], plan, uv_cache=tmp_path, ca_bundle=None)
    assert argv[:2] == ["podman", "build"] and argv[-1] == "."
    assert "--target" in argv and argv[argv.index("--target") + 1] == "ml"
    assert f"{tmp_path}:{images.UV_CACHE_MOUNT}" in argv and "BASE=ghcr.io/a2rl/base:0.1.0" in argv
    assert "--secret" not in argv
    operator = images.build_argv(by_name["operator"], plan, uv_cache=tmp_path, ca_bundle=Path("/ca"))
    assert "--volume" not in operator and "id=ca-bundle,src=/ca" in operator
    check = images.check_argv(by_name["agent-codex"], {"/workspace": tmp_path})
    assert check[:8] == ["podman", "run", "--rm", "--read-only", "--user", "1000:1000", "--network", "none"]
    assert check[check.index("--volume") + 1] == f"{tmp_path}:/workspace"  # as the pod's workspace volume
    assert "--volume" not in images.check_argv(by_name["operator"])
    entry = check[check.index("--entrypoint") + 1]
    assert entry == f"/opt/a2rl-cache/agents/codex-{STACKS['codex'].default_version}/{STACKS['codex'].entry}"


def test_stack_checks_match_the_stack_definitions() -> None:
    assert set(images.STACK_CHECKS) == set(STACKS)
    for name, (entry, *args) in images.STACK_CHECKS.items():
        assert entry == STACKS[name].entry
        if STACKS[name].install == "npm":
            assert args == list(STACKS[name].check)


def test_every_dockerfile_builds_on_the_shared_runtime() -> None:
    # Each component image is FROM the shared runtime (light or ML) or FROM an image built on it;
    # only the runtime itself, the base and the node build image start lower.
    lower = {"base": "DEBIAN", "runtime": "BASE", "node": "BASE"}
    for path in sorted(ROOT.glob("images/*/Dockerfile")):
        name = path.parent.name
        text = path.read_text()
        final = re.findall(r"^FROM (\S+)", text, re.MULTILINE)[-1]
        if name in lower:
            assert final in (f"${{{lower[name]}}}", "ml-extras", "deps"), (name, final)
            continue
        expected = {"operator": "RUNTIME", "recorder": "RUNTIME", "grader": "ML", "agent-baselines": "ML"}
        want = expected.get(name, "BASE")
        assert final == f"${{{want}}}", (name, final)
        default = re.search(rf"^ARG {want}=(\S+)$", text, re.MULTILINE)
        assert default is not None, name
        image = default.group(1).rsplit("/", 1)[-1].split(":")[0]
        assert image == {"RUNTIME": "runtime", "ML": "ml", "BASE": "agent-baselines"}[want], (name, image)
        # No component reinstalls Python packages: the locked environment is the runtime's.
        assert "pip install -c" not in text and "requirements/lock.txt" not in text, name
    runtime = (ROOT / "images/runtime/Dockerfile").read_text()
    assert "FROM deps AS runtime" in runtime and "FROM deps AS ml-deps" in runtime
    assert "-c /opt/a2rl-src/lock.txt" in runtime


def test_runtime_requirements_are_pinned_by_the_lock() -> None:
    pins = images.lock_pins((ROOT / "requirements/lock.txt").read_text())
    names = [
        re.split(r"[\[<>=]", ln.strip())[0].lower()
        for ln in (ROOT / "images/runtime/requirements.in").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert names and all(re.sub(r"[-_.]+", "-", n) in pins for n in names), [
        n for n in names if n not in pins
    ]


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = images.dockerignore_patterns(ROOT)
    for rel in (
        ".venv",
        ".venv/lib/python3.11/site-packages/torch/__init__.py",
        ".git",
        ".git/HEAD",
        "a2rl/__pycache__/x.pyc",
        ".mypy_cache/3.11/x.json",
        ".pytest_cache/v",
        "a2rl.egg-info/PKG-INFO",
        "runs/x",
        "tests/unit/test_images.py",
    ):
        assert images.ignored(rel, patterns), rel
    for rel in (
        "a2rl/stacks.py",
        "requirements/lock.txt",
        "pyproject.toml",
        "README.md",
        "images/node/fetch.py",
        "images/runtime/install.sh",
        "operator/a2rl_operator/__init__.py",
    ):
        assert not images.ignored(rel, patterns), rel
    # Whatever a Dockerfile copies from the context is not excluded.
    for path in ROOT.glob("images/*/Dockerfile"):
        for src in images.copy_sources(path.read_text()):
            assert not images.ignored(src, patterns), (path, src)


def test_copy_sources_reads_continuations_and_skips_stage_copies() -> None:
    text = "FROM x\nCOPY a b ./\nCOPY --from=stage /x /y\nCOPY --chmod=755 \\\n  c /d\nADD e /f\nRUN cp g h\n"
    assert images.copy_sources(text) == ["a", "b", "c", "e"]


def test_errors_are_one_line_without_a_traceback(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman
    monkeypatch.setenv("A2RL_CACHE_DIR", str(tmp_path / "cache"))
    assert images.main(["--only", "operator"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("[images] error: podman is not installed")
    assert "Traceback" not in "\n".join(err)
    assert images.main(["--only", "no-such-image"]) == 1
    assert "no image 'no-such-image'" in capsys.readouterr().err
    monkeypatch.delenv("REGISTRY", raising=False)
    assert images.main(["--push"]) == 1
    assert "PUSH=1 needs REGISTRY" in capsys.readouterr().err


def test_a_failed_step_names_its_last_error_line(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(
        "$ podman build …\nSTEP 1/2: FROM x\nnpm error 404 Not Found - GET https://r/x\nsomething\n"
    )
    assert images.last_error(log) == "npm error 404 Not Found - GET https://r/x"


def test_ci_builds_with_public_bases_and_pins_what_it_built_by_digest(tmp_path: Path) -> None:
    plan = images.plan(images.read_inputs(ROOT))
    by_name = {im.name: im for im in plan if not im.variant}
    base = images.buildx_argv(
        by_name["base"],
        plan,
        registry="ghcr.io/o",
        platforms="linux/amd64,linux/arm64",
        digests={},
        metadata=tmp_path / "m.json",
    )
    assert not any(a.startswith("DEBIAN=") for a in base)  # the Dockerfile's public default
    assert {"--sbom=true", "--provenance=mode=max", "--push"} <= set(base)
    assert base[base.index("--platform") + 1] == "linux/amd64,linux/arm64"
    grader = images.buildx_argv(
        by_name["grader"],
        plan,
        registry="ghcr.io/o",
        platforms="linux/amd64",
        digests={"ml:0.1.0": "sha256:abc"},
        metadata=tmp_path / "m.json",
    )
    assert "ML=ghcr.io/o/ml:0.1.0@sha256:abc" in grader and "ghcr.io/o/grader:0.1.0" in grader
    workflow = (ROOT / ".github/workflows/images.yml").read_text()
    assert "hack/images.py --buildx" in workflow and "packages: write" in workflow
