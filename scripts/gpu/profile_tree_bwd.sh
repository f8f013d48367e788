#!/usr/bin/env bash
# ncu profile of the tree-attention backward kernels (issue #4,
# docs/benchmarks.md "Round 3"), one device call: builds the C-ABI library
# (Release, sm_90a), then profiles DqTC/DkvTC (kTensorCore), BwdFusedTC and
# BwdFusedWideTC once each on one trie (default P=2048 R=4096 G=16).
# Output under $OUT: ncu.txt (speed of light, occupancy, warp state, scheduler).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tandem-gpu-out}
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-gpu-build}
mkdir -p "$OUT"
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
cmake -S kernels/standalone -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DTANDEM_BUILD_TESTS=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target tandem_kernels_capi >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "[gpu] ncu=$NCU $(date -u +%T)"
timeout 400 "$NCU" --kernel-name regex:'DqTC|DkvTC|BwdFused' --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  python3 kernels/tree_attention/bench/tree_attention_profile.py "$BUILD/lib/libtandem_kernels_capi.so" ${TANDEM_PROFILE_SHAPE:-} \
  >"$OUT/ncu.txt" 2>&1
echo "[gpu] ncu rc=$? $(date -u +%T)"
grep -E "^  [A-Za-z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Issue Slots Busy|Executed Ipc Active|L2 Cache Throughput|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -80
