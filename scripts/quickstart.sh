#!/usr/bin/env bash
# Sets up, builds, and runs examples/quickstart.json on the embedded local
# backend (CPU-only): the first command of the README.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF
exec build/bin/tandem run examples/quickstart.json --gpus 0,1 "$@"
