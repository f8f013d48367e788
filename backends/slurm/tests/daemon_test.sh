#!/bin/bash
# tandemd with the Slurm backend (allocation mode) on the real test cluster,
# through its CLI, with faults a user meets (issue #5 item 4):
#
#   restart       tandemd is killed with SIGKILL mid-job and restarted on the
#                 same state dir; the steps keep running, the new daemon
#                 re-attaches them and the job ends succeeded, every role with
#                 its output, and no step is left.
#   ctld-restart  slurmctld is killed with SIGKILL mid-job and started again;
#                 the job still finishes, each step ran exactly once.
# In both, the actor leaves a shm weight segment named like a publisher's;
# it is gone once its step ended (tandem-exec removes it on the node).
#
# Usage: daemon_test.sh restart|ctld-restart. Skips (77) without the cluster;
# fails with TANDEM_SERVICES_REQUIRED=1.
# shellcheck source=../../../tests/services/lib.sh
. "$TANDEM_SOURCE_DIR/tests/services/lib.sh"
need_service slurm SLURM_CONF
CASE=${1:?usage: daemon_test.sh restart|ctld-restart}

job=$(sbatch --parsable --job-name=tandem-test-daemon --output=/dev/null --ntasks=2 \
  --gres=gpu:2 --time=10 --wrap="sleep 600")
CLEANUPS+=("scancel $job")
# The previous Slurm test's jobs may still be completing (their node's GPUs
# not yet free): CI once saw this allocation pending for over 30 s.
wait_for 120 "allocation $job running" \
  bash -c "squeue -h -j $job -o %T | grep -q RUNNING"

# shellcheck source=tandemd.sh
. "$TANDEM_SOURCE_DIR/backends/slurm/tests/tandemd.sh"
steps_of_job() { squeue -h --steps -j "$job" -o %j | grep -vc '^batch$' || true; }
fail() { echo "FAIL: $*" >&2; echo "--- tandemd log" >&2; tail -40 "$SCRATCH/tandemd.log" >&2 || true; exit 1; }

cat >"$SCRATCH/job.json" <<'JSON'
{
  "name": "slurm-restart",
  "backend": {"kind": "slurm"},
  "devices": {"count": 2},
  "env": {"JOB_LAYER": "job"},
  "roles": {
    "actor": {
      "command": ["sh", "-c", "id() { printf %s \"$1\" | tr -c 'A-Za-z0-9._' _; }; echo x > /dev/shm/tandem-$(id \"$TANDEM_JOB_ID\")-$(id \"$TANDEM_TASK_ID\")-v1; sleep 12; echo actor CVD=$CUDA_VISIBLE_DEVICES role=$TANDEM_ROLE layer=$JOB_LAYER mine=$ACTOR_ONLY step=$SLURM_JOB_ID.$SLURM_STEP_ID"],
      "gpus_per_replica": 2,
      "env": {"ACTOR_ONLY": "a"}
    },
    "rollout": {
      "command": ["sh", "-c", "sleep 12; echo rollout CVD=$CUDA_VISIBLE_DEVICES role=$TANDEM_ROLE layer=$JOB_LAYER mine=$ROLLOUT_ONLY step=$SLURM_JOB_ID.$SLURM_STEP_ID"],
      "gpus_per_replica": 2,
      "colocate_with": "actor",
      "env": {"ROLLOUT_ONLY": "r"}
    }
  }
}
JSON

start_daemon --slurm-job "$job"
id=$(T submit "$SCRATCH/job.json" | tail -1)
[[ -n "$id" ]] || fail "submit printed no job id"
wait_for 30 "two steps of the job running" bash -c "[[ \$(squeue -h --steps -j $job -o %j | grep -vc '^batch$') -ge 2 ]]"
pass "job $id runs as steps of allocation $job"
# The actor leaves a weight segment as a publisher killed mid-run would;
# tandem-exec removes it when the step ends (docs/weights.md "The shm segment").
segment=/dev/shm/tandem-$(printf %s "$id" | tr -c 'A-Za-z0-9._' _)-$(printf %s "$id.actor.0" | tr -c 'A-Za-z0-9._' _)-v1
CLEANUPS+=("rm -f $segment")
wait_for 10 "the actor's segment $segment" test -e "$segment"

case $CASE in
  restart)
    kill -9 "$DPID"
    wait "$DPID" 2>/dev/null || true
    [[ $(steps_of_job) -ge 2 ]] || fail "steps died with tandemd ($(steps_of_job) left)"
    pass "steps survive kill -9 of tandemd"
    start_daemon --slurm-job "$job"
    ;;
  ctld-restart)
    # slurmctld saves its state every few seconds: a step created after the
    # last save is unknown to the restarted controller, which kills it when
    # the node registers (Slurm's behaviour, not tandem's); so is a cancel
    # of an earlier test's job. Let it save once.
    sleep 5
    pid=$(<"$TANDEM_SLURMCTLD_PIDFILE")
    kill -9 "$pid"
    wait_for 10 "slurmctld $pid to die" bash -c "! kill -0 $pid"
    "$TANDEM_SLURM_SCRIPT" start >/dev/null
    pass "slurmctld killed and started again mid-job"
    ;;
  *) fail "unknown case $CASE" ;;
esac

wait_end "$id" 60
[[ $(job_state "$id") == succeeded ]] || fail "job $id ended $(job_state "$id"): $(T status "$id" --json)"
actor=$(T logs "$id" --task actor.0)
rollout=$(T logs "$id" --task rollout.0)
echo "$actor"; echo "$rollout"
[[ "$actor" == *"actor CVD=0,1 role=actor layer=job mine=a step=$job."* ]] || fail "actor output: $actor"
[[ "$rollout" == *"rollout CVD=0,1 role=rollout layer=job mine=r step=$job."* ]] || fail "rollout output: $rollout"
[[ $(grep -c . <<<"$actor") == 1 && $(grep -c . <<<"$rollout") == 1 ]] || fail "a step ran more than once"
pass "job succeeded; both roles ran once, saw the same devices and their own environment"
[[ ! -e $segment ]] || fail "the actor's weight segment $segment outlived its step"
pass "the actor's weight segment went with its step"
wait_for 10 "no step left" bash -c "[[ \$(squeue -h --steps -j $job -o %j | grep -vc '^batch$') == 0 ]]"
pass "no step left"
