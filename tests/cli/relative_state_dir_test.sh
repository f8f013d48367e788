#!/usr/bin/env bash
# `tandem run --state-dir state` (a relative path) must hand its tasks a
# control endpoint they can reach from their own working directory (the run
# dir): the daemon makes --state-dir and --socket absolute. Before, tasks got
# `unix:state/control.sock`, and every native worker of the quickstart failed
# with "connect unix:state/control.sock: No such file or directory".
set -euo pipefail
BIN=${TANDEM_BIN_DIR:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/relative-state-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cat >job.json <<'SPEC'
{"name": "relative-state", "backend": {"kind": "local"}, "run_dir": "runs/rel",
 "roles": {"probe": {"command": ["bash", "-c", "echo \"$TANDEM_CONTROL\" >control.txt; [[ -S ${TANDEM_CONTROL#unix:} ]]"]}}}
SPEC
"$BIN/tandem" run job.json --state-dir state --gpus none >run.out 2>&1 || { echo "FAIL: tandem run"; cat run.out; exit 1; }
control=$(cat runs/rel/control.txt)
[[ $control == "unix:$tmp/state/control.sock" ]] || { echo "FAIL: the task got TANDEM_CONTROL=$control"; exit 1; }
echo "PASS: the task reached $control from $(realpath runs/rel)"
