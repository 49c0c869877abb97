// Stage variants: timing-only builds that benchmarks/stage_breakdown.py and the twin scripts ask
// the JIT for (codegen defines MOEGEMM_STAGE_VARIANT before any include). Production kernels
// never define it. Each kernel file documents what its bits do; the schedulers read bit 2
// (m-grouped walk without rotation) and bit 4 (k-grouped tiles round-robin in group order).
#pragma once

#ifndef MOEGEMM_STAGE_VARIANT
#define MOEGEMM_STAGE_VARIANT 0
#endif
