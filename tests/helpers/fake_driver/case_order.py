"""A pytest plugin for the fake-driver cases' subprocess: MOEGEMM_FAKE_DRIVER_ORDER=reversed runs
the cases last to first. The cases share one process (the launchers' descriptor memo, the
fake's counters), so a case that leans on what an earlier one left shows up as a failure here
rather than as an occasional one in the full suite."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("MOEGEMM_FAKE_DRIVER_ORDER") == "reversed":
        items.reverse()
