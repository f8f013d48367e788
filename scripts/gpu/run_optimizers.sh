#!/usr/bin/env bash
# The optimizers on the H200 (issue #17 "Correctness" and "Performance";
# docs/optimizers.md, docs/benchmarks.md "Optimizers"), one device call:
#   1. unpacks .gpu-deps/serving.tar.xz (ICU for workers/train's data
#      dependencies; scripts/gpu/stage_deps.sh --serving);
#   2. builds adamw_gpu_test (the fused AdamW kernel against its CPU
#      implementation, bit for bit), train_optimizers_test (with
#      tests/optimizers_cuda_test.cc: staged through the stream pipeline
#      against native on the GPU, GPU against CPU, a release giving the
#      state back) and train_optimizer_bench (workers/standalone, the
#      machine's LibTorch);
#   3. runs the tests, then the benchmark at OPT_SIZES parameters (default
#      "1e9 7e9") and PyTorch's AdamW on the same shapes
#      (scripts/gpu/optimizer_baseline.py: fused on the GPU; foreach on the
#      CPU at 1e9 only), and prints the ratios.
# Results under $OUT: optimizers.json (one object per size), tests.log, build.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tandem-gpu-out}
DEPS=/tmp/tandem-opt-deps
BUILD=${TANDEM_GPU_BUILD_DIR:-/tmp/tandem-opt-build}
SIZES=${OPT_SIZES:-"1e9 7e9"}
mkdir -p "$OUT" "$DEPS"
. scripts/gpu/lib.sh  # what every GPU job here wants in its environment
tar xJf .gpu-deps/serving.tar.xz -C "$DEPS" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

start=$(date +%s)
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S workers/standalone -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTANDEM_WITH_TORCH=ON -DTANDEM_JSON_INCLUDE_DIR="$ROOT/.gpu-deps/include" \
  -DTANDEM_GTEST_SOURCE_DIR="$ROOT/.gpu-deps/googletest" -DTANDEM_ICU_ROOT="$DEPS/icu" >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j16 --target adamw_gpu_test train_optimizers_test train_optimizer_bench -- -k 0 >>"$OUT/build.log" 2>&1
rc=$?
echo "[gpu] build rc=$rc ($(( $(date +%s) - start )) s)"
if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
export LD_LIBRARY_PATH="$DEPS/icu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }

status=0
timeout 120 "$(bin adamw_gpu_test)" >"$OUT/adamw_gpu_test.log" 2>&1 || status=1
grep -E '^\[  PASSED  \]|^\[  FAILED  \]|Failure' "$OUT/adamw_gpu_test.log" | sed 's/^/[adamw_gpu_test] /' | head -20
timeout 300 "$(bin train_optimizers_test)" >"$OUT/tests.log" 2>&1 || status=1
grep -E '^\[cuda\]|^\[  PASSED  \]|^\[  FAILED  \]|Failure' "$OUT/tests.log" | head -30
# The CPU staged cases under each of LibTorch's CPU kernels (vectorised
# tails differ): which ones agree with native.
for cap in default avx2 avx512; do
  ATEN_CPU_CAPABILITY=$cap timeout 120 "$(bin train_optimizers_test)" --gtest_filter='AdamW.Staged*:AdamW.Restore*:OptimizersCuda.NativeAdamW*' 2>&1 |
    grep -E '^\[(adamw|cuda)\]|OK \]|FAILED \]' | sed "s/^/[$cap] /"
done

: >"$OUT/optimizers.json"
for n in $SIZES; do
  dtype=fp32; [[ $n != 1e9 ]] && dtype=bf16  # 7B in fp32 with its grads and moments does not fit next to native state
  ours=$(timeout 600 "$(bin train_optimizer_bench)" --params "$n" --dtype "$dtype" 2>"$OUT/bench-$n.err") || { tail -5 "$OUT/bench-$n.err"; status=1; continue; }
  cpu=""; [[ $n == 1e9 ]] && cpu=--cpu
  base=$(timeout 600 python3 scripts/gpu/optimizer_baseline.py --params "$n" $cpu 2>>"$OUT/bench-$n.err") || { tail -5 "$OUT/bench-$n.err"; status=1; continue; }
  python3 - "$ours" "$base" <<'PY' | tee -a "$OUT/optimizers.json"
import json, sys
o, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
o["baseline"] = b
if "adamw_staged_s" in o:
    o["staged_vs_fused"] = b["fused_gpu_s"] / o["adamw_staged_s"]
    if "foreach_cpu_s" in b:
        o["staged_speedup_vs_cpu"] = b["foreach_cpu_s"] / o["adamw_staged_s"]
print(json.dumps(o))
PY
  python3 - "$ours" "$base" <<'PY'
import json, sys
o, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
g = lambda k: o.get(k, float("nan"))
print(f"[gpu] {o['params']/1e9:.2f}B {o['dtype']}: adamw native fused {g('adamw_native_s'):.4f} s "
      f"(unfused {g('adamw_native_unfused_s'):.4f} s: {g('fused_speedup'):.2f}x; HBM bound {g('adamw_native_bound_s'):.4f} s "
      f"at {g('copy_gbps'):.0f} GB/s: {100*g('fused_vs_bound'):.0f}%; torch fused / ours {b['fused_gpu_s']/g('adamw_native_s'):.2f}), staged {g('adamw_staged_s'):.3f} s "
      f"(PCIe bound {g('pcie_bound_s'):.3f} s: {100*g('staged_vs_bound'):.0f}%), muon staged {g('muon_staged_s'):.3f} s; "
      f"torch fused {b['fused_gpu_s']:.3f} s" + (f", torch cpu foreach {b['foreach_cpu_s']:.2f} s" if 'foreach_cpu_s' in b else ""))
print(f"[gpu] pinned GB/s h2d {g('h2d_gbps'):.1f} d2h {g('d2h_gbps'):.1f} duplex {g('duplex_gbps'):.1f}; "
      f"staged peak {g('adamw_staged_gpu_peak_bytes')/2**20:.0f} MiB (slots {o['slots']} x {o['slot_mib']} MiB); "
      f"NS {1e3*g('ns_s'):.1f} ms vs its matmuls {1e3*g('ns_matmul_s'):.1f} ms ({g('ns_vs_matmul'):.2f}x)")
PY
done
exit $status
