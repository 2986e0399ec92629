"""Fixtures shared by every test. Helpers importable without pytest live in tests/helpers.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests import helpers


@pytest.fixture
def free_port() -> Callable[[], int]:
    """Call it for each port needed: ``port = free_port()``."""
    return helpers.free_port
