#!/usr/bin/env bash
# scripts/serving_demo.sh as a test: in a scratch directory, with a model of
# two sft steps (its text is noise; the checks are on the handoff and on the
# two engines' agreement, not on what the model says).
set -euo pipefail
work=$(mktemp -d "${TMPDIR:-/tmp}/serving-demo-XXXXXX")
trap 'rm -rf "$work"' EXIT
SERVING_SFT_STEPS=2 bash "${TANDEM_SOURCE_DIR:?}/scripts/serving_demo.sh" "$work"
