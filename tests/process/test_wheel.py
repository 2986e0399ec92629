"""The wheel as a user gets it: built from the tracked files, installed in a fresh venv that
also holds proto-plus (whose import name is ``proto``), then ``raftq dev up`` and README's
tour run from that venv, outside the checkout, so nothing resolves from the source tree.

The venv installs raftq's dependencies from the package index like any user's ``pip install``
(pip's cache, filled by ``make venv``, makes that take seconds).
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

from tests.process.test_dev_up import DevUp, free_bases
from tests.process.test_readme import blocks, section

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, timeout: float = 600, **env: str) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": "", **env},
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def build_wheel(out: Path) -> Path:
    """The wheel of the tracked files (as committed or edited: a clean copy, no build dirs)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    source = out / "source"
    for name in (n.decode() for n in tracked if n):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(out / "dist"), str(source)),
        ],
        cwd=out,
    )
    (wheel,) = (out / "dist").glob("raftq-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(wheel, a directory whose ``.venv`` is a fresh venv with the wheel and proto-plus)."""
    home = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(home)
    run([sys.executable, "-m", "venv", str(home / ".venv")], cwd=home)
    pip = [str(home / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, str(wheel), "proto-plus"], cwd=home)
    yield wheel, home


def test_the_wheel_installs_only_the_raftq_package(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {
        "raftq",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    for needed in (
        "raftq/configs/default.yaml",
        "raftq/client/__init__.py",
        "raftq/spark/__init__.py",
        "raftq/partitions/machine.py",
        "raftq/proto/api_pb2.py",
        "raftq/transport/raft/node.py",
        "raftq/web/app.py",  # raftq console (the console extra's dependencies)
        "raftq/web/templates/base.html",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("raftq/") and "/tests/" in n]


def test_raftq_and_proto_plus_live_side_by_side(installed: tuple[Path, Path]) -> None:
    _, home = installed
    python = str(home / ".venv" / "bin" / "python")
    out = run(
        [
            python,
            "-c",
            "import proto, raftq; from raftq import Admin, Consumer, Producer; "
            "from raftq.spark import register; from raftq.aio import AsyncProducer; "
            "from raftq.proto import api_pb2; import raftq.config as c; "
            "print(proto.Message.__module__, raftq.__file__, c.DEFAULT_CONFIG_PATH.is_file())",
        ],
        cwd=home,
    )
    plus, package, config_found = out.split()
    assert plus.startswith("proto.")  # proto-plus's, not raftq's generated code
    assert package.startswith(str(home / ".venv")) and config_found == "True"


def test_dev_up_and_the_tour_run_from_the_installed_wheel(installed: tuple[Path, Path]) -> None:
    _, home = installed
    python = str(home / ".venv" / "bin" / "python")
    dev = DevUp(home / "data", 3, free_bases(3), python=python, cwd=home)
    try:
        bootstrap = dev.expect("export RAFTQ_BOOTSTRAP=").split("=", 1)[1].strip()
        tour = section("A five-minute tour")
        (shell,) = blocks(tour, "bash")
        out = run(["bash", "-e", "-o", "pipefail", "-c", shell], home, RAFTQ_BOOTSTRAP=bootstrap)
        assert "produced 1000 records to jobs" in out and "group workers" in out
        first = bootstrap.split(",")[0]
        for number, code in enumerate(blocks(tour, "python")):
            script = home / f"tour{number}.py"
            script.write_text(code.replace("127.0.0.1:7070", first))
            assert run([python, str(script)], home).strip()
    finally:
        assert dev.stop() == 0
