#!/bin/sh
# install.sh [uv pip install arguments…]: one locked install into /opt/a2rl, run by the RUN steps
# of images/runtime/Dockerfile. uv is brought in for the step only (pip, into /tmp, removed after):
# it never lands in a layer. UV_CACHE_DIR is the step's wheel cache (a cache mount, or the host's
# uv cache under `make images`); the optional build secret `ca-bundle` is a proxy's CA bundle.
set -eu
if [ -s /run/secrets/ca-bundle ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle PIP_CERT=/run/secrets/ca-bundle; fi
python3 -m venv /tmp/uv
/tmp/uv/bin/pip install -q --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION:?}"
UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never /tmp/uv/bin/uv pip install -q --python /opt/a2rl/bin/python "$@"
rm -rf /tmp/uv
