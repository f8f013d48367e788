#!/usr/bin/env bash
# Sets up, builds (every backend: local, Slurm, Redis), and runs
# examples/quickstart.json on the embedded local backend (CPU-only is fine):
# the first command of the README. The run dir is runs/quickstart (the
# spec's run_dir), which the README's tour reads.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[quickstart] 1/3 installing what the build needs (scripts/setup.sh)"
scripts/setup.sh
echo "[quickstart] 2/3 building into build/ (scripts/build.sh)"
scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF
echo "[quickstart] 3/3 build/bin/tandem run examples/quickstart.json --gpus 0,1"
exec build/bin/tandem run examples/quickstart.json --gpus 0,1 "$@"
