"""Build ``.typecheck/raftq``, the import package as mypy must see it, from symlinks.

The wheel maps broker/ to ``raftq`` and the other folders to its subpackages (pyproject's
package-dir). The editable install does that with an import hook mypy does not run, so
``make lint`` type-checks this symlink view instead: every file checked once, under the name
code imports it by. Usage: python scripts/typecheck_tree.py  (prints the directory).
"""

from __future__ import annotations

import pathlib
import shutil
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def build(out: pathlib.Path) -> pathlib.Path:
    """Recreate ``out/raftq`` from pyproject.toml's package-dir mapping; return ``out``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(out, ignore_errors=True)
    package = out / "raftq"
    package.mkdir(parents=True)
    for entry in sorted((ROOT / mapping["raftq"]).iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in sorted(mapping.items()):
        if name != "raftq" and (ROOT / folder / "__init__.py").is_file():
            (package / name.removeprefix("raftq.")).symlink_to(ROOT / folder)
    return out


if __name__ == "__main__":
    print(build(ROOT / ".typecheck"))
