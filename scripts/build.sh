#!/usr/bin/env bash
# Configures and builds tandem into build/ (or $TANDEM_BUILD_DIR).
# Usage: scripts/build.sh [extra cmake args...]   e.g. -DCMAKE_BUILD_TYPE=Sanitize
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
JOBS=${TANDEM_JOBS:-$(nproc)}
echo "[build] configuring $BUILD_DIR/ ($*)"
cmake -S . -B "$BUILD_DIR" -G Ninja "$@"
echo "[build] building $BUILD_DIR/ with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "[build] done: $BUILD_DIR/bin/"
