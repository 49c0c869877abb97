"""Transition shim: the names of the old heuristics/sm90.py while other modules move to the
package's exports (`from moegemm.heuristics import ...`). Delete once nothing imports it."""

from __future__ import annotations

from .config import GemmConfig
from .ragged import ROUTING_SPREAD, group_m_blocks, rows_sigma  # noqa: F401
from .sm90_bf16 import *
from .sm90_bf16 import _grouped_epilogue, _swap_ab_tile_pipes, _tile_pipes  # noqa: F401
from .waves import count_tiles, expected_waves  # noqa: F401


def store_cols(config: GemmConfig) -> int:
    """Old spelling of GemmConfig.store_cols."""
    return config.store_cols
