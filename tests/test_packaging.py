"""The sdist and wheel as they would be published: built once (`python -m build`: the sdist,
then the wheel from the unpacked sdist) and their file lists checked against the source tree.
A file the code reads at run time (a Lua script, a template, a static file) missing from the
wheel would only show on a user's machine: an editable install reads the checkout.
.ci/package installs the wheel into a fresh venv and runs the command line from it."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "streamsaver"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def _one(dist: Path, pattern: str) -> Path:
    (path,) = dist.glob(pattern)
    return path


def _source_files() -> set[str]:
    """Every file of the package in the checkout, as a path under the package's parent."""
    return {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def _wheel_names(dist: Path) -> set[str]:
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
        return set(wheel.namelist())


def test_wheel_holds_every_file_of_the_package(dist: Path) -> None:
    names = _wheel_names(dist)
    package = {name for name in names if name.startswith("streamsaver/")}
    assert package == _source_files()
    lua = {name for name in package if name.endswith(".lua")}
    assert {p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.glob("lua/**/*.lua")} == lua
    assert "streamsaver/lua/shared/common.lua" in lua
    for folder in ("streamsaver/web/templates/", "streamsaver/web/static/"):
        assert any(name.startswith(folder) for name in package), folder
    assert "streamsaver/py.typed" in package


def test_wheel_holds_nothing_else(dist: Path) -> None:
    tops = {name.split("/", 1)[0] for name in _wheel_names(dist)}
    (info,) = tops - {"streamsaver"}
    assert info.endswith(".dist-info"), tops
    names = _wheel_names(dist)
    assert f"{info}/licenses/LICENSE" in names
    assert not any(name.endswith((".pyc", ".pyo")) for name in names)


def test_wheel_metadata(dist: Path) -> None:
    with zipfile.ZipFile(_one(dist, "*.whl")) as wheel:
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(info).decode())
        entry_points = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert metadata["Name"] == "streamsaver"
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "# streamsaver" in (metadata.get_payload() or "")
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"demo", "embedded", "web", "encryption", "hiredis"} <= extras
    urls = metadata.get_all("Project-URL") or []
    assert any(url.startswith("Source, https://") for url in urls), urls
    assert "streamsaver = streamsaver.cli:main" in entry_points


def test_sdist_holds_what_builds_the_wheel_and_no_tests(dist: Path) -> None:
    with tarfile.open(_one(dist, "*.tar.gz")) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} <= names
    assert {f"src/{name}" for name in _source_files()} <= names
    # the tests run from a git checkout (pyproject.toml, [tool.hatch.build.targets.sdist])
    for folder in ("tests/", "benchmarks/", "examples/", "projector/", "docs/", ".ci/"):
        assert not any(name.startswith(folder) for name in names), folder
