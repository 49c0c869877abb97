#!/usr/bin/env bash
# Build, test and measure moegemm on an H200 that has no package registry, in stages that fit
# the device tool's limits (10 minutes a command, 30 minutes of device time a session).
#
#   tools/gpu_run.sh LOG_DIR STAGES [-- PYTEST_ARGS...]
#
# STAGES, comma-separated, run in this order whatever order they are given in:
#   tests      the GPU test suite (default args: -m gpu tests). A cold JIT cache makes it ~18 min
#              in one process on an H100; with pytest-xdist's wheels in .whl/ (pip download
#              --no-deps pytest-xdist execnet -d .whl) it runs in GPU_RUN_TESTS_WORKERS processes
#              (default 3, one file each at a time: --dist loadfile; 1: one process, which also prints
#              the FP8 x FP4 tests' worst calc_diff lines), which compile in parallel; tests that
#              failed beside the others (three workers can run out of GPU memory) rerun alone
#   ab         tools/build_twins.py: every benchmark case, this tree against the baseline
#              (.baseline/, see below) built beside it, interleaved; geomean new/old per layout
#              (~3-4 min with both builds' kernels compiled cold). BF16 by default; FP8 x FP4
#              with GPU_RUN_AB_ARGS="--layouts fp4_masked,fp4_offs"
#   host       benchmarks/host_path_profile.py: per-call host time of every public function
#              against torch.mm (~1 min)
#   warmup     `python -m moegemm.jit --warmup --model $GPU_RUN_WARMUP_MODEL` into a fresh cache,
#              with the CLI's GPU check (default model qwen3-30b-a3b; ~1 min)
#   bench      benchmarks/bench_bf16.py, the grouped family against its peers (~2 min)
#   dense      benchmarks/bench_bf16_gemm.py, dense against cuBLAS (~1 min)
#   fp8        benchmarks/bench_fp8_fp4.py, the FP8 x FP4 family against its peers (~3-4 min;
#              GPU_RUN_FP8_ARGS, e.g. --quick). Its peer DeepGEMM FP8 runs in the same process
#              when GPU_RUN_DEEPGEMM_DIR names a DeepGEMM source tree with its fmt submodule
#              (carry it): built in the background from the start, with the CUTLASS headers of
#              the nvidia-cutlass wheel (~80 s on 16 cores); the stage waits for it.
#   fp8cfg     tools/fp8_fp4_config_sweep.py: the FP8 x FP4 pick against the decode kernel's
#              configs (GPU_RUN_FP8CFG_ARGS, e.g. --problems dsv3-l1-r8-masked; ~2-3 min)
#   moe        benchmarks/bench_moe.py, the fused MoE layer against its peers (GPU_RUN_MOE_ARGS,
#              e.g. --models qwen3-30b-a3b --tokens 1,32,2048)
#   hf         benchmarks/bench_transformers.py, transformers' experts implementations
#              (GPU_RUN_HF_ARGS, e.g. --models qwen3-30b-a3b --tokens 1,64); with
#              GPU_RUN_DEEPGEMM_DIR its "deepgemm" runs on that build (as for fp8)
#   quality    benchmarks/heuristic_quality.py --all (~2 min)
#   resources  tools/resource_report.py against .baseline/ (no GPU needed; 16 cores here)
#   ncu        Nsight Compute on $GPU_RUN_NCU_CASE through tools/profile_case.py, or with
#              GPU_RUN_NCU_FP8="<args>" on tools/profile_fp8_fp4.py <args> (FP8 x FP4);
#              GPU_RUN_NCU_EXTRA adds ncu options (e.g. "--print-details all --section SourceCounters")
#   sm100      the first Blackwell machine (B200 10.0 / B300 10.3; nothing of it has run on
#              hardware yet): one line and rc 3 unless the GPU is CC 10.x; else
#              tests/gpu/test_sm100_gpu.py (every SM100 family and layout, graphs, no host sync) with
#              the arch-neutral GPU tests ($SM100_TESTS), then torch-peer benchmarks: bench_bf16
#              --quick (torch._grouped_mm, torch.mm, bmm), bench_moe BF16 (the torch composition
#              of the layer) and bench_fp8_fp4 --quick (prepared sm_100f weights); a summary
#              table last. GPU_RUN_SM100_PARTS=tests or =bench runs one half (a cold JIT cache
#              may need two calls: the second with GPU_RUN_BUILD=0 on the warm machine).
#              Alone: tools/gpu_run.sh LOG_DIR sm100 (8-10 min cold: see README)
# `all` is tests,ab,host,warmup (more than one command's 10 minutes: split it across calls).
#
# Before the call, on the machine that calls the tool (the device copies the working tree and the
# ignored paths named in `carry`, nothing else):
#   mkdir -p .git/info && grep -qsx '/.baseline/' .git/info/exclude || echo /.baseline/ >> .git/info/exclude
#   rm -rf .baseline && mkdir .baseline && git archive 3f8aa66 python csrc include CMakeLists.txt \
#     | tar -x -C .baseline && echo 3f8aa66 > .baseline/REVISION       # the baseline (~0.5 MB)
#   python3 -m pip download --no-deps nvidia-cutlass==4.2.0.0 -d .whl   # CUTLASS headers
# and name both in carry: [".whl", ".baseline"]. TREE_COMMIT=<hash> names the tree in the
# reports: pass it. The device's git metadata can be an older copy than its files (seen: the
# session's first HEAD named every later tree), so without it the reports read that HEAD, with
# "+modified" where the files differ from it.
#
# Builds _C with the system gcc/g++ (a g++ from elsewhere was seen to crash inside libstdc++ when
# loaded into that Python). Every stage is bounded so that the script ends, summary printed,
# before GPU_RUN_DEADLINE_S (default 570 s) from its start. Logs go to LOG_DIR: the JSON files
# and summary.txt as they are, every log packed into logs.tar.gz at the end (the tool brings back
# at most 8 files). Knobs are GPU_RUN_* variables: a MOEGEMM_* one would reach the packages.
set -uo pipefail
log_dir=${1:?usage: tools/gpu_run.sh LOG_DIR STAGES [-- PYTEST_ARGS...]}
stages_arg=${2:?usage: tools/gpu_run.sh LOG_DIR STAGES [-- PYTEST_ARGS...]}
shift 2
[ "${1:-}" = "--" ] && shift
pytest_args=("$@")
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(-m gpu tests)

known=(tests ab host warmup bench dense fp8 fp8cfg moe hf quality resources ncu sm100)
stages=",${stages_arg//all/tests,ab,host,warmup},"
for s in ${stages_arg//,/ }; do
  [[ $s == all || " ${known[*]} " == *" $s "* ]] || { echo "unknown stage '$s' (known: ${known[*]} all)"; exit 2; }
done

mkdir -p "$log_dir"
log_dir=$(cd "$log_dir" && pwd)
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1 CC=/usr/bin/gcc CXX=/usr/bin/g++
start_s=$SECONDS
deadline_s=${GPU_RUN_DEADLINE_S:-570}
commit=${TREE_COMMIT:-}
if [ -z "$commit" ]; then
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ "$commit" = unknown ] || git diff --quiet HEAD -- 2>/dev/null || commit="$commit+modified"
fi
export TREE_COMMIT=$commit # the benchmarks' JSON name the tree by it (run_info)
summary=()

# Seconds a stage may take: its own limit, but never past the deadline (15 s kept for the end).
budget() {
  local left=$((deadline_s - (SECONDS - start_s) - 15))
  ((left < $1)) && echo $((left > 0 ? left : 1)) || echo "$1"
}
# run_stage NAME LIMIT_S LOG CMD...: runs CMD under its budget, output to LOG_DIR/LOG and the
# console; records rc and seconds for the summary.
run_stage() {
  local name=$1 limit log=$log_dir/$3 t0=$SECONDS rc
  limit=$(budget "$2")
  shift 3
  echo "== $name (limit ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  ((rc == 124 || rc == 137)) && echo "!! $name stopped at its limit (${limit} s)" | tee -a "$log"
  summary+=("$(printf '%-10s rc %-3s %5d s' "$name" "$rc" $((SECONDS - t0)))")
  return 0
}

site=/tmp/moegemm_site
rm -rf "$site" && mkdir -p "$site"
wheels=(.whl/nvidia_cutlass-*.whl)
wheel=${wheels[0]}
[ -f "$wheel" ] || { echo "no nvidia-cutlass wheel in .whl/ (carry .whl)"; exit 1; }
python3 -m zipfile -e "$wheel" "$site" # no unzip on that machine
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export MOEGEMM_CUTLASS_INCLUDE="$site/cutlass_library/source/include"
export MOEGEMM_CACHE_DIR=${MOEGEMM_CACHE_DIR:-/tmp/moegemm_cache}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv \
  | tee "$log_dir/gpu.txt"
echo "tree $commit, stages $stages_arg" | tee -a "$log_dir/gpu.txt"
t0=$SECONDS
if [ "${GPU_RUN_BUILD:-1}" != 0 ]; then # 0: the package is built already (a warm machine)
  echo "== build"
  if ! python3 -m pip install --no-build-isolation --no-deps -e . >"$log_dir/build.log" 2>&1; then
    tail -40 "$log_dir/build.log"
    exit 1
  fi
  summary+=("$(printf '%-10s rc %-3s %5d s' build 0 $((SECONDS - t0)))")
fi
dg_pid=
if [[ ($stages == *,fp8,* || $stages == *,hf,*) && -n ${GPU_RUN_DEEPGEMM_DIR:-} ]]; then
  dg_dir=$(cd "$GPU_RUN_DEEPGEMM_DIR" && pwd)
  cutlass_inc="$site/cutlass_library/source/include"
  (
    cd "$dg_dir" || exit 1
    # An archive of the tree leaves the CUTLASS submodule empty: the wheel's headers stand in.
    [ -e third-party/cutlass/include ] || { mkdir -p third-party/cutlass &&
      ln -sfn "$cutlass_inc" third-party/cutlass/include; }
    for lib in cutlass cute; do
      [ -e "deep_gemm/include/$lib" ] || ln -sfn "$cutlass_inc/$lib" "deep_gemm/include/$lib"
    done
    MAX_JOBS=8 python3 setup.py build || exit 1
    so=$(find build -name "_C*.so" | head -1)
    [ -n "$so" ] && ln -sf "../$so" deep_gemm/
  ) >"$log_dir/deepgemm_build.log" 2>&1 &
  dg_pid=$!
fi

if [[ $stages == *,tests,* ]]; then
  workers=()
  xdist=(.whl/pytest_xdist-*.whl .whl/execnet-*.whl)
  if [ -f "${xdist[0]}" ] && [ -f "${xdist[1]}" ] && [ "${GPU_RUN_TESTS_WORKERS:-3}" -gt 1 ] &&
    python3 -m pip install -q --no-deps --no-index "${xdist[@]}" >"$log_dir/xdist.log" 2>&1; then
    workers=(-n "${GPU_RUN_TESTS_WORKERS:-3}" --dist loadfile)
  fi
  run_stage tests "${GPU_RUN_TESTS_TIMEOUT:-480}" pytest.log \
    python3 -m pytest -q -rs --durations=15 "${workers[@]}" "${pytest_args[@]}"
  # Workers share the GPU's memory: a test that failed beside others (out of memory) runs
  # again alone; the summary keeps both lines.
  if ((${#workers[@]})) && grep -qE "^[0-9]+ failed|, [0-9]+ failed" "$log_dir/pytest.log"; then
    run_stage retest 240 pytest_retest.log \
      python3 -m pytest -q -rs -p no:xdist --last-failed --last-failed-no-failures none \
      "${pytest_args[@]}"
  fi
fi
if [[ $stages == *,sm100,* ]]; then
  sm100_parts=",${GPU_RUN_SM100_PARTS:-tests,bench},"
  # The arch-neutral GPU tests: public functions only, no SM90 config or weight layout.
  SM100_TESTS=(tests/gpu/test_sm100_gpu.py tests/gpu/test_bf16_gemm_gpu.py tests/gpu/test_quant_gpu.py
               tests/gpu/test_torch_compile_gpu.py)
  if ! cc=$(python3 -c 'import torch; p = torch.cuda.get_device_properties(0)
print(f"{p.major}.{p.minor} {p.name}")' 2>&1); then
    echo "!! sm100: no CUDA device visible to torch: ${cc##*$'\n'}" | tee "$log_dir/sm100.log"
    summary+=("$(printf '%-10s rc %-3s %5d s' sm100 3 0)")
  elif [[ $cc != 10.* ]]; then
    echo "!! sm100: this GPU is CC ${cc%% *} (${cc#* }), not Blackwell CC 10.x (B200, B300)" \
      | tee "$log_dir/sm100.log"
    summary+=("$(printf '%-10s rc %-3s %5d s' sm100 3 0)")
  else
    echo "sm100: CC ${cc%% *} (${cc#* })" | tee "$log_dir/sm100.log"
    if [[ $sm100_parts == *,tests,* ]]; then
      run_stage sm100-test "${GPU_RUN_SM100_TESTS_TIMEOUT:-330}" sm100_pytest.log \
        python3 -m pytest -q -rs --durations=10 -m gpu "${SM100_TESTS[@]}"
    fi
    if [[ $sm100_parts == *,bench,* ]]; then
      run_stage sm100-bf16 "${GPU_RUN_SM100_BF16_TIMEOUT:-150}" sm100_bench_bf16.log \
        python3 benchmarks/bench_bf16.py --quick --json "$log_dir/sm100_bench_bf16.json"
      run_stage sm100-moe "${GPU_RUN_SM100_MOE_TIMEOUT:-120}" sm100_bench_moe.log \
        python3 benchmarks/bench_moe.py --models qwen3-30b-a3b,gpt-oss-20b --tokens 1,64,2048 \
        --json "$log_dir/sm100_bench_moe.json"
      run_stage sm100-fp8 "${GPU_RUN_SM100_FP8_TIMEOUT:-120}" sm100_bench_fp8.log \
        python3 benchmarks/bench_fp8_fp4.py --quick --weights prepared \
        --json "$log_dir/sm100_bench_fp8_fp4.json"
    fi
  fi
fi
if [[ $stages == *,ab,* ]]; then
  if [ ! -d .baseline ] && [ ! -d .git ]; then
    echo "!! ab: no .baseline/ (make it from git archive and carry it: see the header)"
    summary+=("$(printf '%-10s rc %-3s %5d s' ab missing 0)")
  else
    # GPU_RUN_AB_ARGS: extra arguments (e.g. "--quick", "--cases anchor", "--rounds 6"), split on
    # spaces: a --cases regex must hold none (r32.masked, not "r32 masked").
    # shellcheck disable=SC2086
    run_stage ab "${GPU_RUN_AB_TIMEOUT:-420}" build_twins.log \
      python3 tools/build_twins.py --json "$log_dir/build_twins.json" \
      --new-label "$commit" ${GPU_RUN_AB_ARGS:-}
  fi
fi
if [[ $stages == *,host,* ]]; then
  host_args=()
  python3 benchmarks/host_path_profile.py --help 2>/dev/null | grep -q -- --json \
    && host_args=(--json "$log_dir/host_path.json")
  run_stage host "${GPU_RUN_HOST_TIMEOUT:-180}" host_path.log \
    python3 benchmarks/host_path_profile.py "${host_args[@]}"
fi
if [[ $stages == *,warmup,* ]]; then
  warm_cache=$(mktemp -d)
  run_stage warmup "${GPU_RUN_WARMUP_TIMEOUT:-240}" warmup.log \
    python3 -m moegemm.jit --warmup --model "${GPU_RUN_WARMUP_MODEL:-qwen3-30b-a3b}" \
    --cache-dir "$warm_cache"
  rm -rf "$warm_cache"
fi
if [[ $stages == *,bench,* ]]; then
  # shellcheck disable=SC2086
  run_stage bench "${GPU_RUN_BENCH_TIMEOUT:-300}" bench_bf16.log \
    python3 benchmarks/bench_bf16.py --json "$log_dir/bench_bf16.json" ${GPU_RUN_BENCH_ARGS:-}
fi
if [[ $stages == *,dense,* ]]; then
  run_stage dense "${GPU_RUN_DENSE_TIMEOUT:-180}" bench_bf16_gemm.log \
    python3 benchmarks/bench_bf16_gemm.py --json "$log_dir/bench_bf16_gemm.json"
fi
dg_built=
if [ -n "$dg_pid" ] && [[ $stages == *,fp8,* || $stages == *,hf,* ]]; then
  if wait "$dg_pid"; then
    export PYTHONPATH="$dg_dir:$PYTHONPATH" DG_JIT_CACHE_DIR=/tmp/deepgemm_cache
    dg_built=1
  else
    echo "!! DeepGEMM did not build (deepgemm_build.log): fp8 and hf run without it"
  fi
fi
if [[ $stages == *,fp8,* ]]; then
  # shellcheck disable=SC2086
  run_stage fp8 "${GPU_RUN_FP8_TIMEOUT:-330}" bench_fp8_fp4.log \
    python3 benchmarks/bench_fp8_fp4.py --json "$log_dir/bench_fp8_fp4.json" ${GPU_RUN_FP8_ARGS:-}
fi
if [[ $stages == *,fp8cfg,* ]]; then
  # shellcheck disable=SC2086
  run_stage fp8cfg "${GPU_RUN_FP8CFG_TIMEOUT:-300}" fp8_config_sweep.log \
    python3 tools/fp8_fp4_config_sweep.py --json "$log_dir/fp8_config_sweep.json" \
    ${GPU_RUN_FP8CFG_ARGS:-}
fi
if [[ $stages == *,hf,* ]]; then
  # shellcheck disable=SC2086
  run_stage hf "${GPU_RUN_HF_TIMEOUT:-400}" bench_transformers.log \
    python3 benchmarks/bench_transformers.py --json "$log_dir/bench_transformers.json" \
    ${dg_built:+--deepgemm "$dg_dir"} ${GPU_RUN_HF_ARGS:-}
fi
if [[ $stages == *,moe,* ]]; then
  # shellcheck disable=SC2086
  run_stage moe "${GPU_RUN_MOE_TIMEOUT:-400}" bench_moe.log \
    python3 benchmarks/bench_moe.py --json "$log_dir/bench_moe.json" ${GPU_RUN_MOE_ARGS:-}
fi
if [[ $stages == *,quality,* ]]; then
  # shellcheck disable=SC2086
  run_stage quality "${GPU_RUN_QUALITY_TIMEOUT:-240}" heuristic_quality.log \
    python3 benchmarks/heuristic_quality.py ${GPU_RUN_QUALITY_ARGS---all --max-configs 6} \
    --json "$log_dir/heuristic_quality.json"
fi
if [[ $stages == *,resources,* ]]; then
  run_stage resources "${GPU_RUN_RESOURCES_TIMEOUT:-300}" resources.log \
    python3 tools/resource_report.py --baseline .baseline --out "$log_dir/resource_report.txt" \
    --jobs "$(nproc)"
fi
if [[ $stages == *,ncu,* ]]; then
  ncu_found=(/opt/nvidia/nsight-compute/*/ncu)
  ncu_bin=$(command -v ncu || echo "${ncu_found[0]}")
  # shellcheck disable=SC2086
  if [ -n "${GPU_RUN_NCU_FP8:-}" ]; then  # e.g. "--rows 8 --layout masked"
    ncu_kernel=sm90_fp8_fp4_
    ncu_cmd=(python3 tools/profile_fp8_fp4.py $GPU_RUN_NCU_FP8)
  else
    ncu_kernel=sm90_bf16
    ncu_cmd=(python3 tools/profile_case.py "${GPU_RUN_NCU_CASE:-decode/13/offs}"
             ${GPU_RUN_NCU_CONFIGS:-})
  fi
  run_stage ncu "${GPU_RUN_NCU_TIMEOUT:-300}" ncu.log \
    "$ncu_bin" --clock-control none -k regex:$ncu_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section LaunchStats ${GPU_RUN_NCU_EXTRA:-} "${ncu_cmd[@]}"
fi

# The summary: one line per stage, then each stage's own verdict lines.
{
  echo "== summary: tree $commit, $(head -2 "$log_dir/gpu.txt" | tail -1)"
  printf '%s\n' "${summary[@]}"
  [ -f "$log_dir/pytest.log" ] && grep -E "passed|failed|error" "$log_dir/pytest.log" | tail -1
  [ -f "$log_dir/pytest_retest.log" ] &&
    echo "retest alone: $(grep -E "passed|failed|error" "$log_dir/pytest_retest.log" | tail -1)"
  if [ -f "$log_dir/build_twins.log" ]; then
    echo "-- build twins (new / old, geomean per layout):"
    sed -n '/^layout /,$p' "$log_dir/build_twins.log"
  fi
  [ -f "$log_dir/host_path.log" ] && { echo "-- host path:"; tail -12 "$log_dir/host_path.log"; }
  [ -f "$log_dir/warmup.log" ] && { echo "-- warmup:"; grep -vE '^\[[0-9]+/[0-9]+\]' "$log_dir/warmup.log" | tail -8; }
  [ -f "$log_dir/bench_bf16.log" ] && { echo "-- bench_bf16:"; grep -A12 '^geometric means' "$log_dir/bench_bf16.log"; }
  [ -f "$log_dir/bench_fp8_fp4.log" ] && { echo "-- bench_fp8_fp4:"; tail -40 "$log_dir/bench_fp8_fp4.log"; }
  [ -f "$log_dir/bench_moe.log" ] && { echo "-- bench_moe:"; tail -45 "$log_dir/bench_moe.log"; }
  [ -f "$log_dir/bench_transformers.log" ] && { echo "-- bench_transformers:"; tail -40 "$log_dir/bench_transformers.log"; }
  if [ -f "$log_dir/sm100.log" ]; then # last: the first Blackwell run's table
    echo "-- sm100 (SM100 kernels: compiled and statically checked before this run):"
    head -1 "$log_dir/sm100.log"
    printf '%s\n' "${summary[@]}" | grep -E '^(build|sm100)'
    [ -f "$log_dir/sm100_pytest.log" ] && grep -E "^(FAILED|ERROR) " "$log_dir/sm100_pytest.log" \
      | cut -c1-160 | head -25
    [ -f "$log_dir/sm100_pytest.log" ] && grep -E "passed|failed|error" "$log_dir/sm100_pytest.log" | tail -1
    [ -f "$log_dir/sm100_bench_bf16.log" ] && grep -A12 '^geometric means' "$log_dir/sm100_bench_bf16.log"
    [ -f "$log_dir/sm100_bench_moe.log" ] && tail -12 "$log_dir/sm100_bench_moe.log"
    [ -f "$log_dir/sm100_bench_fp8.log" ] && tail -25 "$log_dir/sm100_bench_fp8.log"
  fi
  [ -f "$log_dir/fp8_config_sweep.log" ] && { echo "-- fp8 config sweep:"; sed -n '/^problem /,$p' "$log_dir/fp8_config_sweep.log"; }
} | tee "$log_dir/summary.txt"

# At most 8 files come back: JSON and the summary as they are, every log in one archive.
(
  cd "$log_dir" || exit
  logs=()
  for f in *.log *.txt; do [ -f "$f" ] && [ "$f" != summary.txt ] && logs+=("$f"); done
  [ ${#logs[@]} -eq 0 ] || { python3 -m tarfile -c logs.tar.gz "${logs[@]}" && rm -f "${logs[@]}"; }
)
failed=$(printf '%s\n' "${summary[@]}" | awk '$3 != "0"' | wc -l)
exit $((failed > 0))
