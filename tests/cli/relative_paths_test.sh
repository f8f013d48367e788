#!/usr/bin/env bash
# Relative paths given to `tandem run` (--state-dir, --exec-shim,
# --worker-bin) must still work for tasks, which run in their own working
# directory (the run dir): the daemon makes them absolute. Before, tasks got
# `unix:state/control.sock` (every native worker of the quickstart failed
# with "connect unix:state/control.sock: No such file or directory"), and a
# relative --exec-shim failed every launch.
set -euo pipefail
BIN=${TANDEM_BIN_DIR:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/relative-paths-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
rel=$(realpath --relative-to="$tmp" "$BIN")
cat >job.json <<'SPEC'
{"name": "relative-paths", "backend": {"kind": "local"}, "run_dir": "runs/rel",
 "roles": {"probe": {"command": ["bash", "-c", "echo \"$TANDEM_CONTROL\" >control.txt; [[ -S ${TANDEM_CONTROL#unix:} ]]"]},
           "worker": {"worker": "probe", "args": ["--help"]}}}
SPEC
"$BIN/tandem" run job.json --state-dir state --gpus none --exec-shim "$rel/tandem-exec" \
  --worker-bin "$rel/tandem-worker" >run.out 2>&1 || { echo "FAIL: tandem run"; cat run.out; exit 1; }
control=$(cat runs/rel/control.txt)
[[ $control == "unix:$tmp/state/control.sock" ]] || { echo "FAIL: the task got TANDEM_CONTROL=$control"; exit 1; }
grep -q "tandem-worker probe" runs/rel/tasks/worker.0.out || { echo "FAIL: the worker did not run"; exit 1; }
echo "PASS: from $(realpath runs/rel) the task reached $control; $rel/tandem-exec and $rel/tandem-worker ran"
