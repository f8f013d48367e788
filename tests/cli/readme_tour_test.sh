#!/usr/bin/env bash
# The README's five-minute tour, verbatim, right after what
# scripts/quickstart.sh runs: the `tandem run` line of quickstart.sh, then
# every command of the README's first tour block (README.md "A five-minute
# tour"), each of which must exit 0. It runs in a scratch directory holding
# build/bin (a link to $TANDEM_BIN_DIR) and a shortened
# examples/quickstart.json (a tiny base of two sft steps, two GRPO steps of
# two prompts) so it takes seconds, not the real quickstart's minutes
# (tests/quickstart/quickstart_learning_test.sh runs the real one, shorter).
set -euo pipefail
SRC=${TANDEM_SOURCE_DIR:?}
BIN=${TANDEM_BIN_DIR:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/readme-tour-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build" "$tmp/examples"
ln -s "$BIN" "$tmp/build/bin"
python3 - "$SRC/examples/quickstart.json" "$tmp/examples/quickstart.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
short = {
    "base": {"--preset": "tiny", "--max-steps": "2", "--eval-problems": "4", "--eval-max-new-tokens": "8"},
    "actor": {"--steps": "2", "--prompts-per-step": "2", "--group-size": "2", "--max-new-tokens": "8",
              "--eval-problems": "4", "--eval-every": "1"},
    "rollout": {"--kv-cache-mib": "8"},
}
for name, flags in short.items():
    args = spec["roles"][name]["args"]
    for flag, value in flags.items():
        args[args.index(flag) + 1] = value
json.dump(spec, open(sys.argv[2], "w"), indent=2)
PY

# What quickstart.sh runs last: its `exec build/bin/tandem run ...` line.
run_line=$(grep -E '^exec build/bin/tandem run ' "$SRC/scripts/quickstart.sh" | sed -e 's/^exec //' -e 's/ "\$@"$//')
[[ -n "$run_line" ]] || { echo "FAIL: no 'exec build/bin/tandem run' line in scripts/quickstart.sh"; exit 1; }

# The tour's first ```sh block.
mapfile -t tour < <(awk '/^## A five-minute tour/ {in_tour=1} in_tour && /^```sh/ {in_block=1; next}
  in_block && /^```/ {exit} in_block {print}' "$SRC/README.md")
((${#tour[@]} > 0)) || { echo "FAIL: no sh block under README.md's 'A five-minute tour'"; exit 1; }

cd "$tmp"
step() {
  local cmd=$1
  echo "+ $cmd"
  local rc=0
  bash -c "$cmd" >"$tmp/step.out" 2>"$tmp/step.err" || rc=$?
  if ((rc != 0)); then
    echo "FAIL: exit $rc from: $cmd"
    echo "--- stdout"; cat "$tmp/step.out"; echo "--- stderr"; cat "$tmp/step.err"
    exit 1
  fi
}
step "$run_line"
for line in "${tour[@]}"; do
  cmd=${line%%#*}                     # the README's comment after the command
  cmd=${cmd%"${cmd##*[![:space:]]}"}  # trailing blanks
  [[ -n "$cmd" ]] && step "$cmd"
done
echo "PASS: quickstart's run and ${#tour[@]} tour commands"
