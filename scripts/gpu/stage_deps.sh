#!/usr/bin/env bash
# Copies the header-only and source dependencies the GPU machine lacks into
# .gpu-deps/ (git-ignored; name it in the device call's `carry`):
# nlohmann/json's, fmt's and spdlog's headers (used header-only there) and
# GoogleTest's sources, from this machine's
# Debian packages (scripts/setup.sh --test installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu-deps && mkdir -p .gpu-deps/include
cp -r /usr/include/nlohmann /usr/include/fmt /usr/include/spdlog .gpu-deps/include/
cp -r /usr/src/googletest .gpu-deps/googletest
du -sh .gpu-deps
