#!/usr/bin/env bash
# Smoke tests for the single-node test Slurm of scripts/services/slurm.sh: what
# the Slurm backend (issue #5) relies on, checked with Slurm's own commands.
# Usage: slurm_smoke_test.sh gres|overlap|batch|reservation|restart
. "$(dirname "$0")/lib.sh"
need_service slurm SLURM_CONF
NODE=$TANDEM_SLURM_NODE
TYPE=$TANDEM_SLURM_GPU_TYPE

# job_state ID: prints the job's state (works for finished jobs until MinJobAge).
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
state_is() { [[ "$(job_state "$1")" == "$2" ]]; }
cancel_later() { CLEANUPS+=("scancel $1 2>/dev/null"); }

# Two comma-separated, distinct device ids per two GPUs; typed requests work;
# two jobs running at once get disjoint GPUs.
test_gres() {
  local out
  out=$(srun -N1 --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES)
  [[ "$out" =~ ^[0-3],[0-3]$ && "${out%,*}" != "${out#*,}" ]] || fail "--gres=gpu:2 gave CUDA_VISIBLE_DEVICES='$out'"
  pass "srun --gres=gpu:2 -> CUDA_VISIBLE_DEVICES=$out"

  if [[ -n "$TYPE" ]]; then
    out=$(srun -N1 --gres="gpu:$TYPE:1" printenv CUDA_VISIBLE_DEVICES)
    [[ "$out" =~ ^[0-3]$ ]] || fail "--gres=gpu:$TYPE:1 gave '$out'"
    pass "srun --gres=gpu:$TYPE:1 -> $out"
  fi
  out=$(srun -N1 --gpus-per-node=4 printenv CUDA_VISIBLE_DEVICES)
  [[ "$out" == 0,1,2,3 ]] || fail "--gpus-per-node=4 gave '$out'"
  pass "srun --gpus-per-node=4 -> $out"

  # Two jobs at once, each holding its GPUs until both have reported.
  local a b
  a=$(sbatch --parsable -o a.out --gres=gpu:2 --wrap "printenv CUDA_VISIBLE_DEVICES > a.gpus; while [ ! -e b.gpus ]; do sleep 0.2; done")
  b=$(sbatch --parsable -o b.out --gres=gpu:2 --wrap "printenv CUDA_VISIBLE_DEVICES > b.gpus; while [ ! -e a.gpus ]; do sleep 0.2; done")
  cancel_later "$a"; cancel_later "$b"
  both_done() { state_is "$a" COMPLETED && state_is "$b" COMPLETED; }
  wait_for 30 "both GPU jobs to complete" both_done
  local all
  all=$(cat a.gpus b.gpus | tr ',' '\n' | sort -u | tr '\n' ' ')
  [[ "$all" == "0 1 2 3 " ]] || fail "concurrent jobs overlapped: a=$(<a.gpus) b=$(<b.gpus)"
  pass "concurrent jobs got disjoint GPUs: a=$(<a.gpus) b=$(<b.gpus)"
}

# Two steps with --overlap share one allocation's GPUs and run at the same time.
test_overlap() {
  cat >job.sh <<'EOF'
#!/bin/bash
step() {
  srun --overlap -n1 --gres=gpu:2 bash -c "printenv CUDA_VISIBLE_DEVICES > $1.gpus
    for i in \$(seq 100); do [ -e $2.gpus ] && exit 0; sleep 0.2; done; exit 1"
}
step a b & pa=$!
step b a & pb=$!
wait $pa && wait $pb && echo BOTH_OK
EOF
  local id
  id=$(sbatch --parsable -o job.out -n2 --gres=gpu:2 job.sh)
  cancel_later "$id"
  wait_for 40 "job $id to finish" bash -c "! squeue -h -j $id -t PD,R,CG 2>/dev/null | grep -q ."
  grep -q BOTH_OK job.out || fail "overlapping steps did not both run concurrently: $(cat job.out)"
  [[ "$(<a.gpus)" == "$(<b.gpus)" && "$(<a.gpus)" =~ ^[0-3],[0-3]$ ]] \
    || fail "overlapping steps saw different devices: a=$(<a.gpus) b=$(<b.gpus)"
  pass "two --overlap steps ran concurrently on the same GPUs $(<a.gpus)"
}

# sbatch --parsable, squeue --json (22.05's openapi/v0.0.38 output), scancel.
test_batch() {
  local id
  id=$(sbatch --parsable -o job.out --wrap 'echo $$ > job.pid; exec sleep 300')
  cancel_later "$id"
  [[ "$id" =~ ^[0-9]+$ ]] || fail "sbatch --parsable printed '$id'"
  wait_for 20 "job $id to run" state_is "$id" RUNNING
  wait_for 10 "the job's pid file" test -s job.pid
  local json state
  json=$(squeue --json)
  state=$(jq -r --argjson id "$id" '.jobs[] | select(.job_id == $id) | .job_state' <<<"$json")
  [[ "$state" == RUNNING ]] || fail "squeue --json reports job $id as '$state'"
  pass "squeue --json: job $id $state (Slurm $(jq -r .meta.Slurm.release <<<"$json"))"
  local pid
  pid=$(<job.pid)
  kill -0 "$pid" || fail "job process $pid not running"
  scancel "$id"
  wait_for 20 "job $id to be CANCELLED" state_is "$id" CANCELLED
  wait_for 20 "job process $pid to exit" bash -c "! kill -0 $pid"
  pass "scancel $id: state CANCELLED, process $pid gone"
}

# A reservation created with scontrol and used by a job.
test_reservation() {
  local name=tandem-smoke-$$
  # IGNORE_JOBS: the reservation may overlap jobs of other tests.
  scontrol create reservation ReservationName="$name" StartTime=now Duration=5 \
    Users=root Nodes="$NODE" Flags=IGNORE_JOBS >/dev/null || fail "scontrol create reservation"
  CLEANUPS+=("scontrol delete ReservationName=$name")
  scontrol show reservation "$name" | grep -q "State=ACTIVE" || fail "reservation $name is not active"
  local out
  out=$(srun --reservation="$name" --gres=gpu:1 bash -c 'echo "$SLURM_JOB_RESERVATION $CUDA_VISIBLE_DEVICES"')
  [[ "$out" =~ ^$name\ [0-3]$ ]] || fail "job in reservation printed '$out'"
  pass "srun --reservation=$name ran: $out"
  scontrol delete ReservationName="$name" || fail "scontrol delete reservation"
}

# slurmctld restarted (gracefully, then kill -9) while a job runs: the job
# survives and completes.
test_restart() {
  local id
  id=$(sbatch --parsable -o job.out --gres=gpu:1 --wrap 'while [ ! -e release ]; do sleep 0.2; done; echo DONE')
  cancel_later "$id"
  wait_for 20 "job $id to run" state_is "$id" RUNNING
  "$TANDEM_SLURM_SCRIPT" restart slurmctld
  state_is "$id" RUNNING || fail "job $id is $(job_state "$id") after slurmctld restart"
  pass "job $id still RUNNING after slurmctld restart"

  sleep 1  # let slurmctld save its state once
  local pid
  pid=$(<"$TANDEM_SLURMCTLD_PIDFILE")
  kill -9 "$pid"
  wait_for 10 "slurmctld $pid to die" bash -c "! kill -0 $pid"
  "$TANDEM_SLURM_SCRIPT" start
  state_is "$id" RUNNING || fail "job $id is $(job_state "$id") after kill -9 of slurmctld"
  pass "job $id still RUNNING after kill -9 of slurmctld and start"

  touch release
  wait_for 30 "job $id to complete" state_is "$id" COMPLETED
  grep -q DONE job.out || fail "job output: $(cat job.out)"
  pass "job $id COMPLETED"
}

case "${1:-}" in
  gres | overlap | batch | reservation | restart) "test_$1" ;;
  *) fail "unknown case '${1:-}'" ;;
esac
