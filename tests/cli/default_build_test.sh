#!/usr/bin/env bash
# The default build has every backend whatever is installed when it is
# configured: the configure step scripts/quickstart.sh runs (no tests, no
# benchmarks), done here with every bin directory hidden from CMake's
# find_program (so no srun or sbatch, as on a machine where Slurm is
# installed after the build), must still build the Slurm backend and
# tandem-agent. Then the run-time half: the built tandemd, started with
# --slurm-job on a PATH without srun, refuses with "srun is not in PATH"
# (decided when it starts, not when it was built). Configure only: seconds.
set -euo pipefail
SRC=${TANDEM_SOURCE_DIR:?}
BIN=${TANDEM_BIN_DIR:?}
CMAKE=${CMAKE_COMMAND:-cmake}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/default-build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The compilers and ninja are given by path; everything found by
# find_program in these directories (srun, sbatch, ccache) is not found.
"$CMAKE" -S "$SRC" -B "$tmp/build" -G Ninja \
  -DCMAKE_MAKE_PROGRAM="${CMAKE_MAKE_PROGRAM:-$(command -v ninja)}" \
  -DCMAKE_CXX_COMPILER="${CMAKE_CXX_COMPILER:-$(command -v c++)}" \
  -DCMAKE_C_COMPILER="${CMAKE_C_COMPILER:-$(command -v cc)}" \
  "-DCMAKE_IGNORE_PATH=/usr/bin;/bin;/usr/sbin;/sbin;/usr/local/bin;/usr/local/sbin" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF \
  >"$tmp/configure.log" 2>&1 || { echo "FAIL: configure failed"; cat "$tmp/configure.log"; exit 1; }

fail=0
for target in tandem_backend_slurm tandem_backend_redis tandem-agent tandemd tandem tandem-worker tandem-exec; do
  if grep -qE "^build [^:]*(lib${target}\.a|bin/${target})[ :]" "$tmp/build/build.ninja"; then
    echo "ok: the default build has $target"
  else
    echo "FAIL: the default build has no $target"
    fail=1
  fi
done
((fail == 0)) || { grep -iE "slurm|redis|hiredis" "$tmp/configure.log" || true; exit 1; }

# Run time: no srun in PATH -> a clear refusal naming srun.
mkdir -p "$tmp/state"
rc=0
env PATH=/nonexistent "$BIN/tandemd" --state-dir "$tmp/state" --gpus none --slurm-job 4242 \
  >"$tmp/tandemd.out" 2>&1 || rc=$?
if ((rc == 0)) || ! grep -q "srun is not in PATH" "$tmp/tandemd.out"; then
  echo "FAIL: tandemd --slurm-job without srun in PATH: exit $rc, wanted a refusal naming srun"
  cat "$tmp/tandemd.out"
  exit 1
fi
echo "ok: tandemd --slurm-job without srun in PATH: $(grep -o 'srun is not in PATH' "$tmp/tandemd.out" | head -1)"
echo "PASS"
