"""Generate proto/*_pb2.py (+ _grpc) from proto/*.proto. Deterministic: `make proto`.

Usage: python scripts/gen_proto.py [--out DIR]   (DIR defaults to the repository root)
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    protos = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "proto").glob("*.proto"))
    (out / "proto").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    generated = sorted((out / "proto").glob("*_pb2*.py*"))
    for path in generated:  # proto/ is installed as raftq.proto (pyproject package-dir)
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"^from proto import ", "from raftq.proto import ", text, flags=re.M)
        path.write_text(re.sub(r"'proto\.(\w+_pb2)'", r"'raftq.proto.\1'", text))
    return generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT)
    files = generate(parser.parse_args().out)
    print(f"generated {len(files)} files", file=sys.stderr)


if __name__ == "__main__":
    main()
