#!/usr/bin/env bash
# Builds every libFuzzer target (clang, the Sanitize build type with
# TANDEM_BUILD_FUZZ=ON: cmake/TandemOptions.cmake) and runs each
# (<build dir>/fuzz/*_fuzz) for ${TANDEM_FUZZ_SECONDS:-20} seconds with its
# seed corpus; fails when any target crashes, leaks or times out.
#
# The build dir is ${TANDEM_FUZZ_BUILD_DIR:-build-fuzz}. scripts/test.sh
# points it at its own tree (built with clang and TANDEM_BUILD_FUZZ=ON), so
# CI builds the orchestrator once for tests and fuzzers; a dir not configured
# that way is (re)configured here with the fuzzers only.
#
# Convention for fuzz targets: tandem_fuzz_target(<name>_fuzz ...) in CMake
# (cmake/TandemOptions.cmake). Seeds: the directories listed for it in
# seeds_for below, else tests/fuzz/<name>/ when present. A dictionary
# <name>.dict next to its source is used when present.
# Usage: scripts/fuzz.sh [TARGET...]   (default: every *_fuzz target)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${TANDEM_FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${TANDEM_FUZZ_SECONDS:-20}

seeds_for() {
  case "$1" in
    spec_fuzz) echo "tests/specs examples" ;;
    control_fuzz) echo "tests/fuzz/control" ;;  # pre-/post-handshake and worker-side seeds (first byte: the side)
    *) [[ -d "tests/fuzz/${1%_fuzz}" ]] && echo "tests/fuzz/${1%_fuzz}" ;;
  esac
  return 0
}

cache="$BUILD_DIR/CMakeCache.txt"
if ! grep -qs '^TANDEM_BUILD_FUZZ:BOOL=ON' "$cache" || ! grep -qs '^CMAKE_BUILD_TYPE:STRING=Sanitize' "$cache" ||
   ! grep -qs '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache"; then
  echo "[fuzz] configuring $BUILD_DIR (clang, Sanitize, TANDEM_BUILD_FUZZ=ON, no tests)"
  rm -rf "$cache" "$BUILD_DIR/CMakeFiles"  # another compiler or build type: start over
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Sanitize -DTANDEM_BUILD_FUZZ=ON -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF >/dev/null
fi

if (($#)); then
  targets=("$@")
else
  mapfile -t targets < <(cmake --build "$BUILD_DIR" --target help | sed -n 's/^\([A-Za-z0-9_]*_fuzz\):.*/\1/p' | sort -u)
fi
if ((${#targets[@]} == 0)); then
  echo "[fuzz] no *_fuzz targets (is clang installed?)" >&2
  exit 1
fi
echo "[fuzz] building: ${targets[*]}"
cmake --build "$BUILD_DIR" -j "${TANDEM_JOBS:-$(nproc)}" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# fuzz_one NAME: runs one target for SECONDS_EACH; its report lines go to
# $work/report and its verdict (ok or failed) to $work/verdict.
fuzz_one() {
  local name=$1 bin="$BUILD_DIR/fuzz/$1" work="$BUILD_DIR/fuzz-work/$1" dict seeds args
  mkdir -p "$work/corpus" "$work/artifacts"
  rm -f "$work/verdict"
  args=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$work/artifacts/")
  dict=$(find . -path ./build\* -prune -o -name "$name.dict" -print | head -1)
  [[ -n "$dict" ]] && args+=(-dict="$dict")
  # The first corpus directory is where new inputs go; the seeds are read only.
  read -r -a seeds <<<"$(seeds_for "$name")"
  if "$bin" "${args[@]}" "$work/corpus" "${seeds[@]}" >"$work/log" 2>&1; then
    echo "[fuzz] $name ok ($(grep -o 'stat::number_of_executed_units:[[:space:]]*[0-9]*' "$work/log" | grep -o '[0-9]*$' || echo '?') runs)" >"$work/report"
    echo ok >"$work/verdict"
  else
    { echo "[fuzz] $name FAILED; log: $work/log; crashing input under $work/artifacts/"; tail -n 40 "$work/log"; } >"$work/report"
    echo failed >"$work/verdict"
  fi
}
# Each target is single-threaded: one per core at once (TANDEM_FUZZ_JOBS),
# each still for its whole SECONDS_EACH, so 2 cores take half the time.
max_jobs=${TANDEM_FUZZ_JOBS:-$(nproc)}
failed=()
ran=()
for name in "${targets[@]}"; do
  [[ -x "$BUILD_DIR/fuzz/$name" ]] || { echo "[fuzz] $BUILD_DIR/fuzz/$name was not built" >&2; failed+=("$name"); continue; }
  while (($(jobs -rp | wc -l) >= max_jobs)); do wait -n || true; done
  seeds=$(seeds_for "$name")
  echo "[fuzz] running $name for ${SECONDS_EACH}s (seeds: ${seeds:-none})"
  fuzz_one "$name" &
  ran+=("$name")
done
wait
for name in "${ran[@]}"; do
  work="$BUILD_DIR/fuzz-work/$name"
  if [[ $(cat "$work/verdict" 2>/dev/null) == ok ]]; then
    cat "$work/report"
  else
    cat "$work/report" >&2 2>/dev/null || echo "[fuzz] $name: no verdict" >&2
    failed+=("$name")
  fi
done
cd "$ROOT"
if ((${#failed[@]})); then
  echo "[fuzz] failed: ${failed[*]}" >&2
  exit 1
fi
echo "[fuzz] all targets ok"
