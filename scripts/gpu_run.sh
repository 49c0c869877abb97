#!/usr/bin/env bash
# Build, test and benchmark moegemm on an H200 that has no package registry.
#
#   scripts/gpu_run.sh LOG_DIR [pytest args...]     (default args: tests)
#   MOEGEMM_GPU_TESTS=0 skips the tests; MOEGEMM_GPU_BENCH picks benchmark stages (below; "none"
#   for none).
#
# Needs the nvidia-cutlass wheel carried in .whl/ (pip download --no-deps nvidia-cutlass==4.2.0.0
# -d .whl). Builds _C with the system gcc/g++ (a g++ from elsewhere was seen to crash inside
# libstdc++ when loaded into that Python), runs every test (GPU ones included), then the
# benchmark. Logs and JSON go to LOG_DIR; a short table is printed last.
set -uo pipefail
log_dir=${1:?usage: scripts/gpu_run.sh LOG_DIR [pytest args...]}
shift
mkdir -p "$log_dir"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

site=/tmp/moegemm_site
rm -rf "$site" && mkdir -p "$site"
wheel=$(ls .whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "no nvidia-cutlass wheel in .whl/"; exit 1; }
python3 -m zipfile -e "$wheel" "$site"  # no unzip on that machine
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export MOEGEMM_CUTLASS_INCLUDE="$site/cutlass_library/source/include"
export MOEGEMM_CACHE_DIR=${MOEGEMM_CACHE_DIR:-/tmp/moegemm_cache}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$log_dir/gpu.txt"
echo "== build"
CC=/usr/bin/gcc CXX=/usr/bin/g++ python3 -m pip install --no-build-isolation --no-deps -e . \
  >"$log_dir/build.log" 2>&1 || { tail -40 "$log_dir/build.log"; exit 1; }

test_rc=0
if [ "${MOEGEMM_GPU_TESTS:-1}" != 0 ]; then
  echo "== tests"
  python3 -m pytest -q -rs "${@:-tests}" 2>&1 | tee "$log_dir/pytest.log" | tail -25
  test_rc=${PIPESTATUS[0]}
fi

# Which benchmark stages run: any of warmup, dense, host, grouped, quality, breakdown, clusters,
# ncu, split, ceiling (comma-separated; host, breakdown, clusters, ncu, split and ceiling are
# opt-in; dense includes host).
stages=",${MOEGEMM_GPU_BENCH:-warmup,dense,grouped,quality},"
bench_rc=0

if [[ $stages == *,warmup,* ]]; then
  echo "== warmup (fresh cache, 16 cores) + the CLI's GPU check"
  warm_cache=$(mktemp -d)
  python3 -m moegemm.jit --warmup --model deepseek-v3 --cache-dir "$warm_cache" 2>&1 \
    | tee "$log_dir/warmup.log" | grep -vE '^\[[0-9]+/[0-9]+\]' | tail -14
  rm -rf "$warm_cache"
fi
if [[ $stages == *,dense,* ]]; then
  echo "== dense benchmark and host path"
  python3 benchmarks/bench_bf16_gemm.py --json "$log_dir/bench_bf16_gemm.json" 2>&1 \
    | tee "$log_dir/bench.log" || bench_rc=1
  python3 benchmarks/host_path_profile.py 2>&1 | tee "$log_dir/host_path.log"
fi
if [[ $stages == *,host,* ]]; then
  echo "== host path (dense and grouped functions vs torch)"
  python3 benchmarks/host_path_profile.py 2>&1 | tee "$log_dir/host_path.log" | tail -25
fi
if [[ $stages == *,grouped,* ]]; then
  echo "== grouped benchmark"
  # MOEGEMM_GROUPED_ARGS: extra arguments (e.g. "--order reverse").
  # shellcheck disable=SC2086
  timeout "${MOEGEMM_GROUPED_TIMEOUT:-300}" python3 benchmarks/bench_bf16.py \
    ${MOEGEMM_GROUPED_ARGS:-} --json "$log_dir/bench_bf16.json" 2>&1 \
    | tee "$log_dir/bench_bf16.log" | tail -70 || bench_rc=1
fi
if [[ $stages == *,quality,* ]]; then
  # Every case of the suites by default (112 cases, ~90 s on the H200): the target is per case.
  # MOEGEMM_QUALITY_ARGS= (set, empty) runs the harness's own 14-case default instead.
  echo "== heuristic quality"
  timeout "${MOEGEMM_QUALITY_TIMEOUT:-240}" python3 benchmarks/heuristic_quality.py \
    ${MOEGEMM_QUALITY_ARGS---all --max-configs 6} --json "$log_dir/heuristic_quality.json" 2>&1 \
    | tee "$log_dir/heuristic_quality.log" | tail -30 || bench_rc=1
fi

if [[ $stages == *,clusters,* ]]; then
  echo "== clusters: co-resident CTAs per cluster config, then cluster twins of the prefill picks"
  python3 scripts/cluster_fit.py 2>&1 | tee "$log_dir/cluster_fit.log" || bench_rc=1
  MOEGEMM_EXPERIMENTAL_CLUSTERS=1 timeout 200 python3 benchmarks/heuristic_quality.py \
    --cluster-twins --max-configs 4 --cases 'prefill/.*/offs|masked/6/' \
    --json "$log_dir/cluster_twins.json" 2>&1 | tee "$log_dir/cluster_twins.log" | tail -14 \
    || bench_rc=1
fi
if [[ $stages == *,ncu,* ]]; then
  # Nsight Compute on one case, one launch per config (after its check and a warm-up launch).
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # MOEGEMM_NCU_VARIANT: a stage variant to profile instead (3: loads only); the shared-memory
  # tables show whether the port is the limit of the full kernel and of its loads alone.
  ncu_case=${MOEGEMM_NCU_CASE:-decode/13/offs}
  ncu_variant=${MOEGEMM_NCU_VARIANT:-0}
  echo "== ncu ($ncu_bin) on $ncu_case, stage variant $ncu_variant"
  for cfg in ${MOEGEMM_NCU_CONFIGS:-m64n256k64s4w1c1x1e64 m128n256k64s3w2c1x1e64}; do
    timeout 300 "$ncu_bin" --clock-control none -k regex:sm90_bf16 --launch-skip 2 \
      --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section LaunchStats \
      python3 scripts/profile_case.py "$ncu_case" "$cfg" --stage-variant "$ncu_variant" \
      >"$log_dir/ncu_${cfg}_v$ncu_variant.txt" 2>&1 || bench_rc=1
    echo "-- $cfg"
    grep -E "Duration|DRAM Throughput|L2 Hit Rate|L1/TEX Hit|Memory Throughput|Registers Per|Stall|Issued Warp|Shared" \
      "$log_dir/ncu_${cfg}_v$ncu_variant.txt" | head -30
  done
fi
if [[ $stages == *,split,* ]]; then
  # Split tails (experimental) against the default build of the same config, interleaved in one
  # process: the gpt-oss mid-size shape (ragged and equal rows) and a dsv3 L1 prefill shape.
  echo "== split tails: twins of the default build"
  for spec in "--rows 256 --ragged 0.3 --configs m128n240k64s3w2c1x1e16 m128n256k64s3w2c1x1e64" \
              "--rows 192 --configs m128n240k64s3w2c1x1e16" \
              "--groups 32 --n 4096 --k 7168 --rows 1024 --ragged 0.3 --configs m128n256k64s3w2c1x1e64"; do
    # shellcheck disable=SC2086
    timeout 200 python3 scripts/tail_cost.py $spec --twins 2>&1 | tee -a "$log_dir/split_twins.log" \
      || bench_rc=1
  done
fi
if [[ $stages == *,ceiling,* ]]; then
  # Read-only streams against the copy ceiling, then sustained cuBLAS with the clock, power and
  # clock-event (throttle) reasons sampled every 100 ms.
  echo "== read ceiling and clock-event reasons"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.hw_thermal_slowdown \
    --format=csv -lms 100 >"$log_dir/smi_samples.csv" 2>&1 &
  smi_pid=$!
  python3 scripts/read_ceiling.py --sustain-s "${MOEGEMM_SUSTAIN_S:-4}" 2>&1 \
    | tee "$log_dir/read_ceiling.log" || bench_rc=1
  kill "$smi_pid" 2>/dev/null
  tail -3 "$log_dir/smi_samples.csv"
fi
if [[ $stages == *,breakdown,* ]]; then
  echo "== stage breakdown (variants that leave the wgmma or the stores out)"
  python3 benchmarks/stage_breakdown.py 2>&1 | tee "$log_dir/stage_breakdown.log" || bench_rc=1
fi

echo "== summary"
[ -f "$log_dir/pytest.log" ] && grep -E "passed|failed|error" "$log_dir/pytest.log" | tail -1
exit $(( test_rc != 0 || bench_rc != 0 ))
