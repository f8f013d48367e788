#!/usr/bin/env bash
# Sets up, builds (every backend: local, Slurm, Redis; the LibTorch
# workers), and runs examples/quickstart.json on the embedded local backend
# (CPU-only is fine): the first command of the README. The job trains a
# small base model with sft (cached in runs/quickstart/base/: a second run
# reuses it), then improves it with GRPO, an actor and two rollouts sharing
# two declared GPUs; it ends with the held-out accuracy before and after.
# The run dir is runs/quickstart (the spec's run_dir), which the README's
# tour reads.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[quickstart] 1/3 installing what the build needs (scripts/setup.sh)"
scripts/setup.sh
echo "[quickstart] 2/3 building into build/ (scripts/build.sh)"
scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF
echo "[quickstart] 3/3 build/bin/tandem run examples/quickstart.json --gpus 0,1 (4.5 to 8 minutes on 2 CPU cores)"
exec build/bin/tandem run examples/quickstart.json --gpus 0,1 "$@"
