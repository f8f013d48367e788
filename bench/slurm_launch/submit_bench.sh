#!/bin/bash
# Submit-mode launch overhead (issue #5 item 7; docs/benchmarks.md "Slurm
# launch"): one tandem job of N trivial CPU tasks (`true`) through
# `tandemd --slurm-job submit` (sbatch of the batch job, polling, one srun
# step per task, exit records read back), from `tandem submit --wait` to its
# return, next to plain `sbatch` of a batch script running the same N
# `srun --overlap true` steps at once, until squeue no longer lists it
# (polled every 50 ms), on the same cluster. One line per N:
# both wall times and their ratio.
#
#   . /tmp/tandem-services/slurm.env
#   TANDEM_BIN_DIR=build/bin bench/slurm_launch/submit_bench.sh [N...]   (default: 1 10 50)
#   TANDEM_SLURM_API=cli|lib picks how tandemd submits and polls (default auto:
#   libslurm when built).
set -euo pipefail
BIN=${TANDEM_BIN_DIR:-build/bin}
BIN=$(readlink -f "$BIN")
: "${SLURM_CONF:?source /tmp/tandem-services/slurm.env}"
unset SLURM_JOB_ID
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/tandem-submit-bench.XXXXXX")
chmod 0755 "$SCRATCH"
cd "$SCRATCH"
env -u TANDEM_REDIS_URL "$BIN/tandemd" --state-dir "$SCRATCH/state" --slurm-job submit >"$SCRATCH/tandemd.log" 2>&1 &
DPID=$!
trap 'kill "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null; rm -rf "$SCRATCH"' EXIT
for _ in $(seq 100); do [[ -S "$SCRATCH/state/tandemd.sock" ]] && break; sleep 0.1; done
now() { date +%s.%N; }

printf '%6s %12s %12s %7s\n' tasks tandem_s sbatch_s ratio
for n in "${@:-1 10 50}"; do
  cat >"$SCRATCH/job.json" <<JSON
{"name": "bench-$n", "backend": {"kind": "slurm", "time": "10"},
 "roles": {"t": {"command": ["true"], "replicas": $n}}}
JSON
  t0=$(now)
  "$BIN/tandem" --socket "$SCRATCH/state/tandemd.sock" submit --wait "$SCRATCH/job.json" >/dev/null 2>&1 || echo "tandem job of $n failed" >&2
  t1=$(now)
  id=$(sbatch --parsable --output=/dev/null --ntasks=1 --time=10 \
    --wrap="for i in \$(seq $n); do srun --overlap --gres=none -n1 true & done; wait")
  # Polled like tandem's own wait (sbatch --wait polls every few seconds).
  while [[ -n $(squeue -h -j "$id" -o %T 2>/dev/null) ]]; do sleep 0.05; done
  t2=$(now)
  awk -v n="$n" -v a="$(echo "$t1 - $t0" | bc)" -v b="$(echo "$t2 - $t1" | bc)" \
    'BEGIN { printf "%6d %12.2f %12.2f %7.2f\n", n, a, b, a / b }'
done
