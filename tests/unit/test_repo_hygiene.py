"""The tree holds no leftovers of a merge: no conflict markers in any tracked text file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7}|>{7}) ", re.M)


def test_no_tracked_file_holds_conflict_markers() -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in (".png", ".whl"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if MARKER.search(text):
            marked.append(name)
    assert not marked, f"conflict markers in {marked}"
