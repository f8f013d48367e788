#!/usr/bin/env bash
# The test command: installs what the tests need, builds (warnings as errors;
# the orchestrator and backends under ASan+UBSan), starts the services the
# tests need, and runs every test with ctest. Stops only what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

scripts/setup.sh --test

export TANDEM_BUILD_DIR=${TANDEM_BUILD_DIR:-build-test}
# One tree for the tests and the libFuzzer targets: clang (setup.sh installs
# it), Sanitize (ASan + UBSan, with the fuzzers' coverage instrumentation:
# cmake/TandemOptions.cmake), -Werror. clang compiles this code base in about
# half of g++'s time under the sanitizers, and one tree instead of two is
# most of CI's time saved (docs/testing.md "CI time"). A tree configured
# with another compiler is started over.
if [[ -f "$TANDEM_BUILD_DIR/CMakeCache.txt" ]] &&
   ! grep -qs '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$TANDEM_BUILD_DIR/CMakeCache.txt"; then
  rm -rf "$TANDEM_BUILD_DIR/CMakeCache.txt" "$TANDEM_BUILD_DIR/CMakeFiles"
fi
echo "[test] building in $TANDEM_BUILD_DIR (clang, Sanitize, -Werror, fuzz targets)"
# Benchmarks are not built here (they are never run under the sanitizers;
# scripts/build.sh's default build has them): CI time goes to tests.
# CUDA kernels (when nvcc is here) are compiled and linked but never run in
# CI: the reduced set of template instances is enough for that check
# (TANDEM_CUDA_CI_SUBSET; a full instance set takes ~47 s per .cu file).
scripts/build.sh -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Sanitize \
  -DTANDEM_WERROR=ON -DTANDEM_BUILD_FUZZ=ON -DTANDEM_BUILD_BENCH=OFF -DTANDEM_CUDA_CI_SUBSET=ON

# libFuzzer targets (spec parser, journal recovery, HTTP request path, ...),
# bounded, from the same tree; before ctest so that ctest's summary is the
# last thing printed.
if [[ -z "${TANDEM_SKIP_FUZZ:-}" ]]; then
  TANDEM_FUZZ_BUILD_DIR=$TANDEM_BUILD_DIR TANDEM_FUZZ_SECONDS=${TANDEM_FUZZ_SECONDS:-20} scripts/fuzz.sh
fi

SERVICES=()
cleanup() {
  for s in "${SERVICES[@]}"; do "$ROOT/scripts/services/$s.sh" stop || true; done
}
trap cleanup EXIT
for s in scripts/services/*.sh; do
  [[ -e "$s" ]] || continue
  name=$(basename "$s" .sh)
  "$s" start
  SERVICES+=("$name")
  # Connection info for the tests (SLURM_CONF, TANDEM_TEST_REDIS_PORT, ...).
  env_file=${TANDEM_SERVICES_DIR:-/tmp/tandem-services}/$name.env
  if [[ -f "$env_file" ]]; then set -a; . "$env_file"; set +a; fi
done
# Service tests fail (instead of skipping) when their service is missing.
export TANDEM_SERVICES_REQUIRED=1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$TANDEM_BUILD_DIR"
ctest --output-on-failure -j "${TANDEM_TEST_JOBS:-2}" "$@"
