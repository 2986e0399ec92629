"""The committed proto/*_pb2*.py(i) are exactly what scripts/gen_proto.py generates now."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = "*_pb2*.py*"  # x_pb2.py, x_pb2.pyi, x_pb2_grpc.py


def _gen_proto() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_generated_proto_code_is_up_to_date(tmp_path: pathlib.Path) -> None:
    fresh = {p.name: p for p in _gen_proto().generate(tmp_path)}
    committed = {p.name: p for p in (ROOT / "proto").glob(GENERATED)}
    assert fresh, "scripts/gen_proto.py generated nothing"
    problems = [f"proto/{name} is missing" for name in sorted(fresh.keys() - committed.keys())]
    problems += [
        f"proto/{name} has no .proto any more" for name in sorted(committed.keys() - fresh.keys())
    ]
    problems += [
        f"proto/{name} differs from its .proto"
        for name in sorted(fresh.keys() & committed.keys())
        if fresh[name].read_bytes() != committed[name].read_bytes()
    ]
    assert not problems, "generated protobuf code is stale; run `make proto`:\n" + "\n".join(
        problems
    )
