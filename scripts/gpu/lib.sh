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
