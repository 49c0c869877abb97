"""The frozen description of a problem (`GemmDesc`) and of a kernel choice (`GemmConfig`).

One `GemmConfig` names one compiled kernel: the heuristics produce it, the code generator turns
it into template arguments, the launcher reads its launch shape, and tests and benchmarks
enumerate it. It is hashable and cheap to compare, so it can key dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"bf16": 2, "fp32": 4, "fp8": 1, "fp4": 0.5}


@dataclass(frozen=True)
class GemmDesc:
    """The problem, independent of how it is computed.

    kind: one of KINDS. m is the total rows for the dense and contiguous layouts and the rows
    each group may hold (max_m) for the masked one; n, k per group. expected_m is the rows a
    group is expected to hold (masked: the caller's hint; packed offsets: m / groups); for the
    k-grouped GEMM, m and n are the output's and k is the expected rows per group.
    """

    kind: str
    m: int
    n: int
    k: int
    num_groups: int = 1
    ab_dtype: str = "bf16"
    d_dtype: str = "bf16"
    with_c: bool = False
    expected_m: int = 0
    # FP8 x FP4 only: "raw" is the checkpoint's nibble order, "prepared" the layout that
    # prepare_mxfp4_weights writes; the two need different conversion code, so different kernels.
    weights: str = "raw"
    # FP8 x FP4 prepared weights only: no 64-row block takes the table kernels' exact path
    # (Mxfp4Weights.windowed), which the convert-ahead kernel needs.
    windowed: bool = False
    # The fused MoE layer's epilogues (BF16 m-grouped, offsets or masked): "swiglu" /
    # "swiglu_oai" (n counts w13's gate and up rows, D has n / 2 columns) or "row_scale".
    epilogue: str = "none"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown GEMM kind {self.kind!r}; known: {KINDS}")
        if self.ab_dtype not in AB_DTYPES:
            raise ValueError(f"unknown ab_dtype {self.ab_dtype!r}; known: {AB_DTYPES}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"unknown weights layout {self.weights!r}; known: {WEIGHTS}")
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"unknown epilogue {self.epilogue!r}; known: {EPILOGUES}")
        if self.windowed and self.weights != "prepared":
            raise ValueError("windowed describes prepared weights only")


# Dense, the three m-grouped layouts (per-row indices, packed offsets, masked), k-grouped.
KINDS = (
    "bf16_gemm_nt",
    "m_grouped_contiguous",
    "m_grouped_offsets",
    "m_grouped_masked",
    "k_grouped",
)

# Operand types: BF16 x BF16, and FP8 (E4M3) activations x MXFP4 (E2M1 + UE8M0) weights.
AB_DTYPES = ("bf16", "fp8_fp4")
WEIGHTS = ("raw", "prepared")
# The kernels' Config::kMoeEpilogue values (include/moegemm/epilogue/functors.cuh).
EPILOGUES = ("none", "swiglu", "swiglu_oai", "row_scale")
MOE_EPILOGUE_IDS = {"none": 0, "swiglu": 1, "swiglu_oai": 2, "row_scale": 3}


@dataclass(frozen=True)
class Layout:
    """Tile shape and CTA arrangement. swap_ab puts B's N on the MMA's M side."""

    block_m: int
    block_n: int
    block_k: int
    swap_ab: bool = False
    cluster_m: int = 1
    cluster_n: int = 1
    # Grouped walk (packed offsets, masked): a group's tiles taken stripe_m m-blocks at a time;
    # 0 takes all of its m-blocks per n-block.
    stripe_m: int = 0
    # The FP8 x FP4 decode kernel's grouped walk with its last wave split along K into at most
    # split_tail parts a tile (scheduler/tail_split_scheduler.cuh; its launches take a
    # workspace); 0: whole tiles only.
    split_tail: int = 0

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n


@dataclass(frozen=True)
class StorageConfig:
    """The TMA maps a launch encodes, as the kernel reads them: each box (inner, outer) in
    elements of its tensor, innermost first (SM90 FP4 codes: bytes; SM100: 4-bit codes), and
    each swizzle span in bytes (0: none). These are the launch's only source (csrc/ reads them
    through the launcher's keyword arguments); the family's is_legal checks them."""

    load_box_a: tuple[int, int]  # each CTA's share of a multicast tile
    load_box_b: tuple[int, int]
    swizzle_a: int
    swizzle_b: int
    store_box_d: tuple[int, int] | None = None  # None: stores from registers
    swizzle_d: int = 0
    load_box_sfb: tuple[int, int] | None = None  # prepared scale words by TMA (unswizzled)

    def launcher_kwargs(self) -> dict[str, object]:
        """The `_C` launchers' keyword arguments ((0, 0): no map)."""
        return {
            "load_box_a": self.load_box_a, "load_box_b": self.load_box_b,
            "swizzle_a": self.swizzle_a, "swizzle_b": self.swizzle_b,
            "load_box_sfb": self.load_box_sfb or (0, 0),
            "store_box_d": self.store_box_d or (0, 0), "swizzle_d": self.swizzle_d,
        }  # fmt: skip


@dataclass(frozen=True)
class PipelineConfig:
    num_stages: int
    smem_bytes: int
    # FP8 x FP4: stages of the transform warpgroup's ring of converted (FP8) B tiles; 0 = none.
    transform_stages: int = 0


@dataclass(frozen=True)
class LaunchConfig:
    """Threads a CTA and math warpgroups. The grid is the plan's (the device's SM count), so a
    config is the same kernel on any SM count."""

    num_threads: int
    num_math_warpgroups: int


@dataclass(frozen=True)
class GemmConfig:
    layout: Layout
    storage: StorageConfig
    pipeline: PipelineConfig
    launch: LaunchConfig

    @property
    def store_cols(self) -> int:
        """The TMA-store box width in columns, 0 for the register-store epilogue."""
        box = self.storage.store_box_d
        return box[0] if box else 0

    def short_name(self) -> str:
        lay = self.layout
        return (
            f"m{lay.block_m}n{lay.block_n}k{lay.block_k}s{self.pipeline.num_stages}"
            f"w{self.launch.num_math_warpgroups}c{lay.cluster_m}x{lay.cluster_n}"
            + ("t" if lay.swap_ab else "")
            + (f"p{lay.stripe_m}" if lay.stripe_m else "")
            + (f"q{lay.split_tail}" if lay.split_tail else "")
            + (f"e{self.storage.store_box_d[0]}" if self.storage.store_box_d else "")
            + (f"x{self.pipeline.transform_stages}" if self.pipeline.transform_stages else "")
        )
