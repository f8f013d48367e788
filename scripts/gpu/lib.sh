# What the scripts/gpu/run_*.sh that run tandem jobs on the GPU machine share
# (sourced, after `cd` to the repository root and setting OUT):
#   gpu_worker_build DEPS BUILD BIN
#     unpacks .gpu-deps/serving.tar.xz (scripts/gpu/stage_deps.sh --serving or
#     --rl: ICU, tandem and tandem-exec built here with the libraries they
#     need, jq, Qwen3's tokenizer) into DEPS; builds tandem-worker there
#     (workers/standalone against the machine's LibTorch, Release, sm_90a) in
#     BUILD, log $OUT/build.log; puts tandem, tandem-exec and tandem-worker in
#     BIN, BIN on PATH, and the carried libraries on LD_LIBRARY_PATH.
#     Returns non-zero (after printing the build's errors) when anything fails.
#   gpu_run_job WORK NAME LIMIT_S RUN_DIR
#     runs `tandem run WORK/NAME.json --gpus 0` from WORK for at most LIMIT_S,
#     its output in $OUT/NAME.out and .err, WORK/runs/RUN_DIR's metrics.jsonl
#     and handoff.jsonl as $OUT/NAME.metrics.jsonl and .handoff.jsonl, its
#     actor's log tail as $OUT/NAME.actor.log (printed with the job's end
#     when it failed); prints and returns the job's exit status.
# Also sets what every GPU job here wants: NVLink multicast off (KINDS.md),
# unbuffered Python, ASAN_OPTIONS=detect_leaks=0 (the carried tandem may be
# a sanitized build: stage_deps.sh's TANDEM_ORCH_BIN).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export ASAN_OPTIONS=detect_leaks=0

gpu_worker_build() {
  local deps=$1 build=$2 bin=$3 root=$PWD
  mkdir -p "$OUT" "$deps" "$bin"
  tar xJf .gpu-deps/serving.tar.xz -C "$deps" || return 1
  # The machine's own jq, when it has one, must not load the carried libjq.
  if command -v jq >/dev/null; then rm -f "$deps"/orch/lib/libjq.so* "$deps"/orch/lib/libonig.so*
  else cp "$deps/orch/bin/jq" "$bin/"; fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
  local start rc torch_prefix
  start=$(date +%s)
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cmake -S workers/standalone -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$root/.gpu-deps/include" \
    -DTANDEM_GTEST_SOURCE_DIR="$root/.gpu-deps/googletest" -DTANDEM_ICU_ROOT="$deps/icu" >"$OUT/build.log" 2>&1 &&
    cmake --build "$build" -j16 --target tandem-worker -- -k 0 >>"$OUT/build.log" 2>&1
  rc=$?
  echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
  if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; return 1; fi
  cp "$(find "$build" -name tandem-worker -type f -perm -u+x | head -1)" "$bin/" || return 1
  cp "$deps/orch/bin/tandem" "$deps/orch/bin/tandem-exec" "$bin/" || return 1
  export PATH=$bin:$PATH
  # libicuuc finds libicudata through the path too (it has no RUNPATH).
  export LD_LIBRARY_PATH="$deps/orch/lib:$deps/icu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$bin/tandem" --version && "$bin/tandem-worker" --list-workers | tr '\n' ' ' && echo
}

gpu_run_job() {
  local work=$1 name=$2 limit=$3 run_dir=$4 t0 rc
  t0=$(date +%s)
  (cd "$work" && timeout "$limit" tandem run "$work/$name.json" --gpus 0 >"$OUT/$name.out" 2>"$OUT/$name.err")
  rc=$?
  echo "[gpu] job $name rc=$rc ($(( $(date +%s) - t0 )) s)"
  cp "$work/runs/$run_dir/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
  cp "$work/runs/$run_dir/handoff.jsonl" "$OUT/$name.handoff.jsonl" 2>/dev/null
  tail -n 40 "$work/runs/$run_dir/tasks/actor.0.err" >"$OUT/$name.actor.log" 2>/dev/null
  [[ $rc -eq 0 ]] || { tail -15 "$OUT/$name.err"; tail -15 "$OUT/$name.actor.log"; }
  return $rc
}
