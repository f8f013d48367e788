#!/usr/bin/env bash
# Two `tandem run`s side by side on one machine (two embedded daemons, each
# with its own lease registry) never hand one port to two live tasks: the
# machine-wide port claims (backends/port_lease.h, --port-lock-dir). The
# control: with the claims off, the two daemons lease the very same ports
# (their tasks have not bound them yet, so the bind check passes twice),
# which is how a second job's rollout used to die of EADDRINUSE.
set -euo pipefail
BIN=${TANDEM_BIN_DIR:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/concurrent-runs-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Runs jobs LABEL-a and LABEL-b at once with TANDEM_PORT_LOCK_DIR=$2; each
# has 4 tasks of 2 ports that write their ports and stay alive 4 s.
run_pair() {
  local label=$1 lock=$2 n
  for n in a b; do
    cat >"$tmp/$label-$n.json" <<SPEC
{"name": "$label-$n", "backend": {"kind": "local"}, "env": {"PORTS_OUT": "$tmp/$label-$n.ports"},
 "roles": {"srv": {"command": ["bash", "-c", "echo \$TANDEM_PORTS >\$PORTS_OUT.\$TANDEM_RANK; sleep 4"],
                   "replicas": 4, "ports": 2}}}
SPEC
    (cd "$tmp" && TANDEM_PORT_LOCK_DIR="$lock" "$BIN/tandem" run "$label-$n.json" --state-dir "$tmp/state-$label-$n" \
       --gpus none >"$tmp/$label-$n.out" 2>&1) &
    pids+=($!)
  done
  wait "${pids[-2]}" || { echo "FAIL: $label-a"; cat "$tmp/$label-a.out"; exit 1; }
  wait "${pids[-1]}" || { echo "FAIL: $label-b"; cat "$tmp/$label-b.out"; exit 1; }
}
ports_of() { cat "$tmp/$1".ports.* | tr ',' '\n' | sort -n; }

run_pair claims "$tmp/locks"
a=$(ports_of claims-a); b=$(ports_of claims-b)
[[ $(wc -l <<<"$a") -eq 8 && $(wc -l <<<"$b") -eq 8 ]] || { echo "FAIL: expected 8 ports a run"; echo "$a"; echo "$b"; exit 1; }
both=$(comm -12 <(echo "$a") <(echo "$b"))
if [[ -n "$both" ]]; then echo "FAIL: ports leased by both runs: $(echo $both)"; exit 1; fi
echo "with claims: run a $(echo $a), run b $(echo $b): disjoint"

run_pair control none
a=$(ports_of control-a); b=$(ports_of control-b)
both=$(comm -12 <(echo "$a") <(echo "$b") | wc -l)
echo "without claims: $both of 8 ports leased by both runs"
[[ $both -gt 0 ]] || { echo "FAIL: the control shares no port; this test no longer shows what the claims prevent"; exit 1; }
echo "PASS"
