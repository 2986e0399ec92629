"""The layering invariants of ARCHITECTURE.md, checked on every import of the source tree.

Each I/O library is imported in one place, and the pure packages (what Raft applies, the
assignor) import no I/O, clock, randomness or threads. A rule is an absence: "only X imports
Y", "P imports none of Z". The checker reads files with ``ast`` and never imports them.
"""

from __future__ import annotations

import ast
import fnmatch
import pathlib
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ("broker", "metadata", "partitions", "assignors", "transport", "proto", "bench")

PURE = ("partitions/", "metadata/", "assignors/")
PURE_EXCEPT = ("partitions/sqlite_store.py",)
IMPURE_MODULES = frozenset(
    {"grpc", "apsw", "pysyncobj", "dynaconf", "socket", "threading", "time", "random"}
)


@dataclass(frozen=True)
class Rule:
    """Files matching ``applies_to`` and not ``except_in`` import none of ``modules``.

    A pattern ending in "/" is a directory, one with "*" a glob, anything else one file.
    """

    text: str  # the invariant as ARCHITECTURE.md states it
    modules: frozenset[str]  # top-level module names; "grpc" also covers grpc_* and *_pb2_grpc
    applies_to: tuple[str, ...]
    except_in: tuple[str, ...] = ()


EVERYWHERE = ("",)

RULES = (
    Rule(
        "Only partitions/sqlite_store.py (and bench/partition_apply.py, for its raw-insert "
        "baseline) imports apsw.",
        frozenset({"apsw"}),
        EVERYWHERE,
        ("partitions/sqlite_store.py", "bench/partition_apply.py"),
    ),
    Rule(
        "Only transport/raft/ imports pysyncobj.",
        frozenset({"pysyncobj"}),
        EVERYWHERE,
        ("transport/raft/",),
    ),
    Rule(
        "Only broker/config.py imports dynaconf.",
        frozenset({"dynaconf"}),
        EVERYWHERE,
        ("broker/config.py",),
    ),
    Rule(
        "Only broker/inspector.py imports sqlite_utils or sqlite3: the offline inspector reads "
        "partition files; the broker writes them through APSW.",
        frozenset({"sqlite_utils", "sqlite3"}),
        EVERYWHERE,
        ("broker/inspector.py",),
    ),
    Rule(
        "Only broker/metrics.py imports prometheus_client.",
        frozenset({"prometheus_client"}),
        EVERYWHERE,
        ("broker/metrics.py",),
    ),
    Rule(
        "Only broker/spark/datasource.py (and bench/spark_write.py) import pyspark and pyarrow: "
        "the broker runs without the spark extra.",
        frozenset({"pyspark", "pyarrow"}),
        EVERYWHERE,
        ("broker/spark/datasource.py", "bench/spark_write.py"),
    ),
    Rule(
        "Only broker/web/ imports fastapi, starlette, pydantic, jinja2, uvicorn, multipart: the "
        "console's HTTP stack; a broker runs without the console extra.",
        frozenset({"fastapi", "starlette", "pydantic", "jinja2", "uvicorn"})
        | frozenset({"multipart", "python_multipart"}),
        EVERYWHERE,
        ("broker/web/",),
    ),
    Rule(
        "broker/web/ imports no grpc: the console is a gateway over the Python client.",
        frozenset({"grpc"}),
        ("broker/web/",),
    ),
    Rule(
        "Only transport/, broker/ and the generated proto/*_pb2_grpc.py import grpc.",
        frozenset({"grpc"}),
        EVERYWHERE,
        ("transport/", "broker/", "proto/*_pb2_grpc.py"),
    ),
    Rule(
        "partitions/ (except sqlite_store.py), metadata/ and assignors/ import none of "
        + ", ".join(sorted(IMPURE_MODULES))
        + ": what Raft applies and what the assignor decides are pure functions.",
        IMPURE_MODULES,
        PURE,
        PURE_EXCEPT,
    ),
)


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if pattern == "" or (pattern.endswith("/") and path.startswith(pattern)):
            return True
        if "*" in pattern and fnmatch.fnmatchcase(path, pattern):
            return True
        if path == pattern:
            return True
    return False


def _family(module: str) -> str:
    """The name rules use for an imported module: its top level, grpc for all of gRPC."""
    top = module.split(".")[0]
    if top.startswith("grpc_") or module.endswith("_pb2_grpc"):
        return "grpc"  # grpc_health, grpc_reflection; generated stubs import grpc themselves
    return top


def imports(source: str, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """(line, module) of every absolute import, including import_module("x")/__import__("x")."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module
                for alias in node.names:  # from proto import partition_pb2_grpc
                    yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield node.lineno, first.value


def violations(root: pathlib.Path, rules: tuple[Rule, ...] = RULES) -> list[str]:
    """``path:line imports module — rule`` for every broken rule under ``root``'s packages."""
    found: list[str] = []
    for package in SCANNED:
        for file in sorted((root / package).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            for line, module in imports(file.read_text(encoding="utf-8"), path):
                family = _family(module)
                for rule in rules:
                    if (
                        family in rule.modules
                        and _matches(path, rule.applies_to)
                        and not _matches(path, rule.except_in)
                    ):
                        found.append(f"{path}:{line} imports {module}: {rule.text}")
    return sorted(set(found))


def test_the_source_tree_keeps_every_layering_rule() -> None:
    assert (ROOT / "proto").is_dir()  # the scan is looking at the real tree
    broken = violations(ROOT)
    assert not broken, "layering rules broken (see ARCHITECTURE.md):\n" + "\n".join(broken)


# --- the checker itself, on synthetic trees -------------------------------------------------

CASES = [
    # (file, source, broken?)
    ("partitions/machine.py", "import time\n", True),
    ("partitions/machine.py", "from time import monotonic\n", True),
    ("partitions/machine.py", "import random as rnd\n", True),
    ("partitions/machine.py", "import threading\n", True),
    ("partitions/machine.py", "from proto import partition_pb2\n", False),
    ("partitions/machine.py", "from proto import partition_pb2_grpc\n", True),
    ("partitions/machine.py", "from . import codec\nfrom .store import Store\n", False),
    ("partitions/machine.py", "import importlib\nimportlib.import_module('apsw')\n", True),
    ("partitions/sqlite_store.py", "import apsw\n", False),
    ("partitions/sqlite_store.py", "import socket\n", False),
    ("partitions/sqlite_store.py", "import pysyncobj\n", True),
    ("assignors/sticky.py", "import random\n", True),
    ("assignors/sticky.py", "from collections import Counter\n", False),
    ("metadata/state_machine.py", "def f():\n    import socket\n", True),
    ("metadata/frontend.py", "import grpc\n", True),
    ("metadata/frontend.py", "from grpc_health.v1 import health\n", True),
    ("broker/server.py", "import apsw\n", True),
    ("broker/server.py", "import grpc\nfrom grpc_reflection.v1alpha import reflection\n", False),
    ("broker/server.py", "import dynaconf\n", True),
    ("broker/config.py", "from dynaconf import Dynaconf\n", False),
    ("broker/server.py", "import prometheus_client\n", True),
    ("broker/metrics.py", "from prometheus_client import Gauge\n", False),
    ("transport/raft/group.py", "from pysyncobj import SyncObj\n", False),
    ("transport/grpc_server.py", "import pysyncobj\n", True),
    ("transport/grpc_server.py", "import grpc\n", False),
    ("bench/load.py", "import grpc\n", True),
    ("proto/partition_pb2_grpc.py", "import grpc\n", False),
    ("proto/errors.py", "import grpc\n", True),
    ("broker/spark/datasource.py", "from pyspark.sql.datasource import DataSource\n", False),
    ("broker/spark/sink.py", "import pyarrow as pa\n", True),
    ("broker/handlers/produce.py", "def f():\n    import pyspark\n", True),
    ("broker/web/api.py", "from fastapi import FastAPI\n", False),
    ("broker/server.py", "from starlette.requests import Request\n", True),
    ("broker/cli.py", "import uvicorn\n", True),
    ("broker/web/gateway.py", "import grpc\n", True),
]


@pytest.mark.parametrize(("path", "source", "broken"), CASES)
def test_checker_flags_exactly_the_broken_imports(
    tmp_path: pathlib.Path, path: str, source: str, broken: bool
) -> None:
    file = tmp_path / path
    file.parent.mkdir(parents=True)
    file.write_text(source)
    found = violations(tmp_path)
    assert bool(found) == broken, found
    if broken:
        assert found[0].startswith(f"{path}:")


def test_checker_reports_line_module_and_rule(tmp_path: pathlib.Path) -> None:
    (tmp_path / "assignors").mkdir()
    (tmp_path / "assignors" / "sticky.py").write_text('"""doc"""\n\nimport time\n')
    (found,) = violations(tmp_path)
    assert found.startswith("assignors/sticky.py:3 imports time: partitions/ (except")


def test_every_rule_names_what_it_allows() -> None:
    for rule in RULES:
        assert rule.modules and rule.applies_to and rule.text.endswith(".")


# --- one import namespace -------------------------------------------------------------------

# pyproject's package-dir (import prefix -> folder), the one statement of the mapping; longest
# prefix first, so raftq.partitions resolves before raftq.
PACKAGE_DIRS = dict(
    sorted(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"
        ].items(),
        key=lambda item: -len(item[0]),
    )
)
FOLDERS_UNDER_RAFTQ = frozenset(PACKAGE_DIRS.values())


def old_names(root: pathlib.Path) -> list[str]:
    """``path:line imports module`` for every import of a folder by its folder name: code
    imports the package as installed (``raftq.partitions``, not ``partitions``)."""
    found = []
    for folder in (*SCANNED, "tests", "scripts"):
        for file in sorted((root / folder).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            for line, module in imports(file.read_text(encoding="utf-8"), path):
                if module.split(".")[0] in FOLDERS_UNDER_RAFTQ:
                    found.append(f"{path}:{line} imports {module}")
    return sorted(set(found))


def test_code_imports_the_folders_only_under_raftq() -> None:
    broken = old_names(ROOT)
    assert not broken, "import these as raftq.<name> (see ARCHITECTURE.md):\n" + "\n".join(broken)


def test_the_namespace_rule_sees_an_old_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("from partitions.machine import record_size\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.py").write_text("import raftq.partitions\nfrom raftq import proto\n")
    assert old_names(tmp_path) == [
        "tests/test_x.py:1 imports partitions.machine",
        "tests/test_x.py:1 imports partitions.machine.record_size",
    ]


# --- the client is a package of its own -----------------------------------------------------

CLIENT_ROOTS = ("raftq.client", "raftq.spark", "raftq.aio", "raftq")
CLIENT_MAY_IMPORT = (
    "raftq.client",
    "raftq.spark",
    "raftq.aio",
    "raftq.proto",
    "raftq.assignors.partitioner",
    "raftq.transport.tls",  # channels to a broker: TLS, token, message limits
    "raftq.transport.grpc_errors",  # gRPC status + trailers -> the typed errors
)
CLIENT_NEVER = frozenset({"dynaconf", "apsw", "pysyncobj", "sqlite_utils", "prometheus_client"})


def module_file(root: pathlib.Path, module: str) -> pathlib.Path | None:
    """The source file of a raftq module, or None for a name that is not one (an attribute)."""
    for prefix, folder in PACKAGE_DIRS.items():
        if module == prefix or module.startswith(prefix + "."):
            rest = module.removeprefix(prefix).lstrip(".").replace(".", "/")
            base = root / folder / rest if rest else root / folder
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
            return None
    return None


def _loaded_with(module: str) -> list[str]:
    """Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _client_may_load(module: str) -> bool:
    """An allowed module, or a package on the way to one (its __init__ is scanned too)."""
    return module.startswith(CLIENT_MAY_IMPORT) or any(
        allowed.startswith(module + ".") for allowed in CLIENT_MAY_IMPORT
    )


def client_closure_violations(root: pathlib.Path) -> list[str]:
    """Every module the client's modules load, transitively, that it must not: server code,
    or a library only the broker needs."""
    todo = list(CLIENT_ROOTS)
    for package in ("client", "spark"):
        for file in (root / "broker" / package).glob("*.py"):
            if file.stem != "__init__":
                todo.append(f"raftq.{package}.{file.stem}")
    seen: set[str] = set()
    found: list[str] = []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        source = module_file(root, module)
        if source is None:
            continue
        path = source.relative_to(root).as_posix()
        for line, imported in imports(source.read_text(encoding="utf-8"), path):
            if imported.split(".")[0] in CLIENT_NEVER:
                found.append(f"{path}:{line} imports {imported}")
            if imported.split(".")[0] != "raftq":
                continue
            for loaded in _loaded_with(imported):
                if module_file(root, loaded) is None:
                    continue  # an attribute: from raftq.proto import errors names a module...
                if not _client_may_load(loaded):
                    found.append(f"{path}:{line} imports {loaded}")
                todo.append(loaded)
    return sorted(set(found))


def test_the_client_and_spark_load_no_server_code() -> None:
    broken = client_closure_violations(ROOT)
    assert not broken, (
        "raftq.client / raftq.spark must load only the client, the wire (raftq.proto, "
        "transport.tls, transport.grpc_errors) and the key partitioner:\n" + "\n".join(broken)
    )


def test_the_client_rule_follows_imports_through_modules(tmp_path: pathlib.Path) -> None:
    for folder in ("broker/client", "broker/spark", "transport", "assignors", "proto"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "broker" / "__init__.py").write_text("")
    (tmp_path / "broker" / "aio.py").write_text("")
    (tmp_path / "broker" / "client" / "a.py").write_text("from raftq.transport import tls\n")
    (tmp_path / "transport" / "tls.py").write_text("from raftq.transport.auth import X\n")
    (tmp_path / "transport" / "auth.py").write_text("import dynaconf\n")
    (tmp_path / "broker" / "spark" / "s.py").write_text(
        "from raftq.assignors.partitioner import p\nfrom raftq.assignors import sticky\n"
    )
    (tmp_path / "assignors" / "partitioner.py").write_text("")
    (tmp_path / "assignors" / "sticky.py").write_text("")
    assert client_closure_violations(tmp_path) == [
        "broker/spark/s.py:2 imports raftq.assignors.sticky",
        "transport/auth.py:1 imports dynaconf",
        "transport/tls.py:1 imports raftq.transport.auth",
    ]


def test_importing_the_client_loads_no_server_module_or_dynaconf() -> None:
    """The same rule at run time: a fresh interpreter imports the client and the Spark sink."""
    import subprocess
    import sys

    probe = (
        "import sys, raftq.client, raftq.aio, raftq.spark.sink, raftq.spark.source; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('raftq', 'dynaconf')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    loaded = [m for m in out if m != "raftq" and not _client_may_load(m)]
    assert not loaded, loaded
    assert "raftq.client.producer" in out  # the probe did load the client


# --- no import circle -----------------------------------------------------------------------


def _relative_file(root: pathlib.Path, module: str) -> str | None:
    file = module_file(root, module)
    return file.relative_to(root).as_posix() if file is not None else None


def _imported_files(root: pathlib.Path, source: str, path: str) -> set[str]:
    """The raftq files ``source`` imports: ``from raftq.a import b`` names module b when b is
    one (not a.__init__, which Python runs first but which is then no dependency of it);
    imports under ``if TYPE_CHECKING:`` count (a circle of types is one of the design)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, path)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                submodule = _relative_file(root, f"{node.module}.{alias.name}")
                if submodule is not None:
                    found.add(submodule)
                else:
                    modules.append(node.module)
        for module in modules:
            file = _relative_file(root, module)
            if file is not None:
                found.add(file)
    found.discard(path)
    return found


def import_circles(root: pathlib.Path, folders: tuple[str, ...] = ("broker",)) -> list[list[str]]:
    """Every set of raftq files under ``folders`` that import each other in a circle (Tarjan's
    strongly connected components of their import graph, larger than one file), sorted."""
    files = sorted(
        file.relative_to(root).as_posix()
        for folder in folders
        for file in (root / folder).rglob("*.py")
    )
    graph = {f: _imported_files(root, (root / f).read_text(encoding="utf-8"), f) for f in files}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for file in files:
        if file not in index:
            visit(file)
    return sorted(circles)


def test_no_broker_modules_import_each_other_in_a_circle() -> None:
    """Components take narrow collaborators, never the whole Broker: nothing the broker
    builds imports broker/server.py back (ARCHITECTURE.md, the request path). broker/ is the
    raftq package root: the server, the client, Spark, the CLI."""
    circles = import_circles(ROOT)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def _tree(root: pathlib.Path, files: dict[str, str]) -> None:
    for path, source in files.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(source)


def test_the_circle_check_sees_a_circle_through_type_checking(tmp_path: pathlib.Path) -> None:
    _tree(
        tmp_path,
        {
            "broker/__init__.py": "",
            "broker/server.py": "from raftq.backend import Backend\n",
            "broker/backend.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from raftq.server import Broker\n"
            ),
            "metadata/table.py": "from raftq.metadata import machine\n",
            "metadata/machine.py": "import raftq.metadata.table\n",
        },
    )
    assert import_circles(tmp_path, ("broker", "metadata")) == [
        ["broker/backend.py", "broker/server.py"],
        ["metadata/machine.py", "metadata/table.py"],
    ]
    assert import_circles(tmp_path) == [["broker/backend.py", "broker/server.py"]]


def test_a_package_importing_its_modules_is_no_circle(tmp_path: pathlib.Path) -> None:
    _tree(
        tmp_path,
        {
            "broker/handlers/__init__.py": "from raftq.handlers.admin import AdminHandler\n",
            "broker/handlers/admin.py": "from raftq.handlers import admin_ops\n",
            "broker/handlers/admin_ops.py": "from raftq.router import Router\n",
            "broker/router.py": "from raftq.proto import errors\n",
            "proto/errors.py": "",
        },
    )
    assert import_circles(tmp_path, ("broker", "proto")) == []


def test_the_wheel_lists_every_package_folder() -> None:
    """setuptools installs only the packages pyproject names: a new folder of modules left out
    of the list is missing from the wheel (the installed broker then fails to start)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {folder: package for package, folder in setuptools["package-dir"].items()}
    found = set()
    for folder, package in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert sorted(found - set(setuptools["packages"])) == []
