# The two commands of the README: `make demo` (a local BenchRun end to end) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
A2RL := $(VENV)/bin/a2rl
# The heavy builds' cache, outside the clone (as hack/venv and hack/testenv default it).
CACHE := $(or $(A2RL_CACHE_DIR),$(HOME)/.cache/a2rl)
# mypy's incremental cache lives there too: a fresh clone's check then takes ~10 s instead of
# ~2 min (mypy re-checks whatever changed, by content).
MYPY := $(PY) -m mypy --cache-dir $(CACHE)/mypy
# Our own modules' bytecode is cached (in __pycache__/, ignored by git) even where the caller's
# environment says not to: every test spawns processes that import them (the venv's packages are
# byte-compiled when it is synced: hack/venv).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: venv sandbox-deps node-deps node-images demo cluster-demo cluster-demo-down test test-unit test-secret-check test-under-load lint typecheck crds chart lock testenv images image-deps clean

venv:
	@hack/venv

# bubblewrap, the local sandbox of `a2rl run` (docs/local-mode.md)
sandbox-deps:
	@hack/sandbox-deps

# containerd, runc, the CNI plugins, iptables, conntrack: the test environment's real node (docs/testenv.md)
node-deps:
	@hack/node-deps

# The images the real-node tier runs (tests/node), with their bases: seconds when up to date.
node-images: image-deps
	@python3 hack/images.py --no-gpu --only operator recorder grader agent-baselines agent-claude-code

demo: venv sandbox-deps
	$(A2RL) run examples/arith-sft.yaml
	$(A2RL) report --latest

# The demo BenchRun in real containers: the test environment with its real node, the chart installed
# with helm, examples/cluster-demo applied and followed to its report (root; docs/testenv.md).
cluster-demo: venv node-deps image-deps
	$(PY) hack/cluster-demo up

cluster-demo-down:
	python3 hack/cluster-demo down

# The Go builds of the test environment (CPU) and the images (mostly disk and the uv cache) run side
# by side: on a cold machine that saves the shorter of the two (about 10 minutes).
test: venv sandbox-deps node-deps image-deps
	$(MAKE) --no-print-directory -j2 node-images testenv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(MYPY)
	hack/pytest-tiers $(PY)

# The unit tier alone (no control plane, no MinIO, no training): a few minutes.
test-unit: venv sandbox-deps
	$(PY) -m pytest tests/unit

# Finds tests whose expected figures hold for one held-out secret only: the unit tier with a fresh
# random secret (tests/conftest.py prints it, A2RL_TEST_HELDOUT_SECRET=<hex> repeats the session).
test-secret-check: venv sandbox-deps
	A2RL_TEST_HELDOUT_SECRET=random $(PY) -m pytest tests/unit

# Finds tests that hold on an idle machine only: the e2e tier with two CPU-bound processes beside it.
test-under-load: venv sandbox-deps
	hack/testenv build
	hack/under-load 2 -- $(PY) -m pytest tests/e2e

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: venv
	$(MYPY)

crds: venv
	$(A2RL) crds generate --out crds/

# The chart's values.yaml, values.schema.json, crds/ and rbac.yaml, and docs/install.md's value table.
chart: venv
	$(A2RL) chart generate

# hack/venv installs the pinned uv this uses (under ~/.cache/a2rl/tools).
lock: venv
	UV_CACHE_DIR=$(CACHE)/uv $(CACHE)/tools/uv-0.13.9/bin/uv \
	  pip compile requirements/dev.in -o requirements/lock.txt --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28

testenv: venv
	hack/testenv build

# podman, buildah, mmdebstrap and podman's containers.conf drop-in (docs/images.md)
image-deps:
	@hack/image-deps

# Every image under images/, cached by the hashes of its inputs (docs/images.md). A second run with
# nothing changed takes seconds. REGISTRY=<registry/prefix> tags, PUSH=1 also pushes,
# IMAGES="operator grader" builds those (and what they are built on), GPU=0 skips the GPU variants.
images: image-deps
	@python3 hack/images.py $(if $(filter 0,$(GPU)),--no-gpu)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
