"""The ELF CTA-group check of the SM100 compile tests can fail: ptxas marks a kernel whose
tcgen05 instructions use `cta_group::2` as 2-CTA, and one using `cta_group::1` as 1-CTA."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest
from sm100_elf import assert_cta_group_matches_launch, tcgen05_cta_groups
from test_compile_sm100 import cuobjdump

from moegemm.jit.compiler import find_nvcc

pytestmark = pytest.mark.nvcc  # conftest skips these where nvcc is missing

_ALLOC = """
#include <cstdint>
__global__ void alloc_only() {
  __shared__ uint32_t slot;
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(&slot));
  if (threadIdx.x < 32) {
    asm volatile("tcgen05.alloc.cta_group::GROUP.sync.aligned.shared::cta.b32 [%0], 32;"
                 :: "r"(addr));
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::GROUP.sync.aligned;");
  }
  __syncthreads();
  if (threadIdx.x < 32)
    asm volatile("tcgen05.dealloc.cta_group::GROUP.sync.aligned.b32 %0, 32;" :: "r"(slot));
}
"""


def _elf_of(group: int, tmp_path) -> str:
    nvcc = find_nvcc()
    source = tmp_path / f"alloc{group}.cu"
    source.write_text(_ALLOC.replace("GROUP", str(group)))
    cubin = tmp_path / f"alloc{group}.cubin"
    command = [str(nvcc), "-cubin", "-gencode=arch=compute_100f,code=sm_100f", str(source)]
    subprocess.run([*command, "-o", str(cubin)], check=True, capture_output=True)
    return cuobjdump("-elf", str(cubin))


@pytest.mark.parametrize("group", [1, 2])
def test_ptxas_records_the_cta_group(group: int, tmp_path) -> None:
    elf = _elf_of(group, tmp_path)
    assert tcgen05_cta_groups(elf) == {group}
    # Stand-ins for a config launched with clusters of 1 and of 2 CTAs.
    one, two = (SimpleNamespace(layout=SimpleNamespace(cluster_size=n)) for n in (1, 2))
    assert_cta_group_matches_launch(elf, one if group == 1 else two)
    with pytest.raises(AssertionError, match="launched with"):
        assert_cta_group_matches_launch(elf, two if group == 1 else one)
