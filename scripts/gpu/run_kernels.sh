#!/usr/bin/env bash
# Builds, tests and benchmarks the kernels on a GPU machine (issue #4), in one
# call: standalone CMake build of kernels/ (Release, sm_90a), every ctest test
# (CPU and GPU), then the Python benchmarks against the PyTorch baselines.
# Everything lands under $OUT (default /tmp/tandem-gpu-out).
# Usage: scripts/gpu/run_kernels.sh [build] [test] [bench]   (default: all)
#   TANDEM_GTEST_SOURCE_DIR  GoogleTest sources when GTest is not installed
#   TANDEM_BENCH_ARGS        extra arguments for the benchmark scripts
#   TANDEM_BENCHES           which kernels to benchmark (default: every kernels/*/bench/*_bench.py)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-gpu-build}
mkdir -p "$OUT"
STAGES=${*:-build test bench}
export PYTHONUNBUFFERED=1
status=0

echo "[gpu] $(date -u +%FT%TZ) stages: $STAGES"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

if [[ " $STAGES " == *" build "* ]]; then
  GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
  cmake -S kernels/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DTANDEM_GPU_TESTS=ON -DTANDEM_GTEST_SOURCE_DIR="${TANDEM_GTEST_SOURCE_DIR:-}" >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j16 >>"$OUT/build.log" 2>&1
  rc=$?
  echo "[gpu] build rc=$rc"
  if [[ $rc -ne 0 ]]; then tail -40 "$OUT/build.log"; exit 1; fi
fi

if [[ " $STAGES " == *" test "* ]]; then
  (cd "$BUILD" && ctest --output-on-failure -j4 --timeout 600) >"$OUT/tests.log" 2>&1
  rc=$?
  grep -E "tests passed|Failed|FAILED|\*\*\*" "$OUT/tests.log" | head -20
  echo "[gpu] tests rc=$rc"
  [[ $rc -ne 0 ]] && status=1
fi

if [[ " $STAGES " == *" bench "* ]]; then
  LIB="$BUILD/lib/libtandem_kernels_capi.so"
  for b in ${TANDEM_BENCHES:-kernels/*/bench/*_bench.py}; do
    name=$(basename "$b" .py)
    echo "[gpu] $name"
    timeout 420 python3 "$b" "$LIB" --json "$OUT/$name.json" ${TANDEM_BENCH_ARGS:-} 2>&1 | tee "$OUT/$name.log" | tail -25
  done
fi
exit $status
