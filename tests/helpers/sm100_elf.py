"""What an SM100 cubin's ELF says about its tensor-memory use (shared by the SM100 compile tests).

ptxas records the CTA group of the kernel's tcgen05 instructions as an ELF attribute
(EIATTR_TCGEN05_1CTA_USED or _2CTA_USED, from `cta_group::1` / `::2`). A kernel built for
one group and launched with the other cluster size does not run as built, so the attribute
must name exactly the cluster size the host launches the config with.
"""

from __future__ import annotations

import re

from moegemm.heuristics.config import GemmConfig


def tcgen05_cta_groups(elf_dump: str) -> set[int]:
    """The CTA groups (1, 2) of `cuobjdump -elf` output's EIATTR_TCGEN05_*CTA_USED attributes."""
    return {int(n) for n in re.findall(r"EIATTR_TCGEN05_(\d)CTA_USED", elf_dump)}


def assert_cta_group_matches_launch(elf_dump: str, config: GemmConfig) -> None:
    groups = tcgen05_cta_groups(elf_dump)
    launched = config.layout.cluster_size
    assert groups == {launched}, (
        f"ELF tcgen05 CTA groups {sorted(groups)}, launched with {launched}"
    )
