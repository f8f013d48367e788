#!/bin/bash
# Submit mode (docs/slurm.md "Submit mode") on the real test cluster:
# tandemd --slurm-job submit, outside any allocation, submits one batch job
# per tandem job with the spec's scheduling options and runs the tasks as its
# steps. Cases:
#
#   run          a colocated job (2 GPUs) whose batch job pends first (all 4
#                GPUs held by two other jobs, one ending after 4 s): pending
#                (Resources) -> running is logged with Slurm's reason, both
#                roles see the same GPUs (the batch job's 2,3: another job
#                holds 0,1), the job succeeds and the batch job is gone
#                afterwards.
#   cancel       tandem cancel mid-run: the job is cancelled, no step and no
#                batch job are left. The spec has sbatch_args: with the lib
#                API that job is submitted with sbatch (logged) and the
#                argument reaches the batch job.
#   scancel      the batch job is cancelled behind tandem's back: the job
#                fails and its detail carries Slurm's words.
#   reservation  the spec's reservation reaches the batch job.
#   restart      kill -9 of tandemd mid-job; the restarted daemon re-attaches
#                to the batch job by id; the job succeeds, nothing is left.
#   rejected     Slurm refuses the options (unknown partition): the job
#                fails with Slurm's message (sbatch's, or slurm_strerror's).
#   timelimit    the batch job's time limit runs out mid-job (lowered to 0
#                with scontrol update once the steps run, so Slurm's next
#                time-limit sweep ends it): the job fails with "DUE TO TIME
#                LIMIT" and TIMEOUT in its detail, nothing is left.
#   crash-window tandemd killed (a test-only fault point, kill -9 of itself)
#                right after starting a step and before writing its
#                .step.json: the restarted daemon finds the step by the name
#                in its intent record and adopts it; the task ran once, the
#                job succeeds, one batch job, nothing left.
#   lost-submit  tandemd killed (test-only fault point) right after Slurm
#                accepted the batch job, before it recorded the id anywhere:
#                the restarted daemon finds the batch job by name (squeue on
#                a worker), re-attaches both tasks to it, no second batch job,
#                the job succeeds.
#   slow-step    the same crash as crash-window, but the step is slow to be created (an srun
#                wrapper in tandemd's PATH sleeps 5 s before it runs the real
#                srun): the restarted daemon answers its API at once while it
#                waits for the living srun client, then adopts the step (srun
#                ran once for the actor). The adopted step is then cancelled
#                with scancel: the job fails with Slurm's banner in the task's
#                detail, no hang.
#   slow-step-timeout  the wrapper sleeps 300 s on its first actor call, and
#                the daemon waits at most 2 s (test knob
#                TANDEM_TEST_SLURM_STEP_CREATE_WAIT_MS) for the step: it stops
#                that srun client (gone before the task starts again), starts
#                the actor again, the actor ran exactly once, the job succeeds.
#
# Usage: submit_test.sh CASE [API]. API (tandemd --slurm-api): lib, cli or
# auto (default). Skips (77) without the cluster.
# shellcheck source=../../../tests/services/lib.sh
. "$TANDEM_SOURCE_DIR/tests/services/lib.sh"
need_service slurm SLURM_CONF
CASE=${1:?usage: submit_test.sh run|cancel|scancel|scancel-clean|reservation|restart|rejected|timelimit|crash-window|lost-submit|slow-step|slow-step-timeout [lib|cli|auto]}
API=${2:-auto}
unset SLURM_JOB_ID
# shellcheck source=tandemd.sh
. "$TANDEM_SOURCE_DIR/backends/slurm/tests/tandemd.sh"

start_submit_daemon() {
  start_daemon --slurm-job submit --slurm-api "$API"
  [[ $API == auto ]] || grep -q "submit mode: one batch job per tandem job api=$API" "$SCRATCH/tandemd.log" ||
    fail "tandemd does not say it uses api=$API"
}
# Whether process $1 lives (a zombie does not: its parent may never reap it).
alive() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
batch_of() { squeue -h --states=all --name="$1" -o %i | head -1; }
live_batch() { squeue -h --name="$1" -o %i | head -1; }

# After an scancel behind tandem's back: job ID fails with Slurm's CANCELLED
# in its detail. Sets st (the job's status JSON).
fails_cancelled_by_slurm() {
  wait_end "$1" 40
  st=$(T status "$1" --json)
  [[ $(jq -r .state <<<"$st") == failed ]] || fail "job $1: $st"
  [[ "$st" == *"CANCELLED"* ]] || fail "Slurm's CANCELLED missing from the detail: $st"
}

# spec SLEEP [EXTRA_BACKEND_JSON]. "sleep && echo": Slurm's linuxproc
# process tracking signals a step's processes one by one, so sh can outlive
# its killed sleep; with ";" it would echo and exit 0 after a cancel.
# With CLEAN_ON_TERM=1 the roles sleep in a loop and exit 0 on SIGTERM, as a
# worker that shuts down cleanly when Slurm stops it.
spec() {
  local run="sleep $1 && echo"
  [[ ${CLEAN_ON_TERM:-} == 1 ]] && run="trap 'exit 0' TERM; while :; do sleep 1; done; echo"
  cat >"$SCRATCH/job.json" <<JSON
{
  "name": "slurm-submit-$CASE",
  "backend": {"kind": "slurm", "time": "5"${2:+, $2}},
  "devices": {"count": 2},
  "env": {"JOB_LAYER": "job"},
  "roles": {
    "actor": {
      "command": ["sh", "-c", "$run actor CVD=\$CUDA_VISIBLE_DEVICES mine=\$ACTOR_ONLY job=\$SLURM_JOB_ID"],
      "gpus_per_replica": 2,
      "env": {"ACTOR_ONLY": "a"}
    },
    "rollout": {
      "command": ["sh", "-c", "$run rollout CVD=\$CUDA_VISIBLE_DEVICES mine=\$ROLLOUT_ONLY job=\$SLURM_JOB_ID"],
      "gpus_per_replica": 2,
      "colocate_with": "actor",
      "env": {"ROLLOUT_ONLY": "r"}
    }
  }
}
JSON
}

check_outputs() {  # ID BATCH
  local actor rollout cvd
  actor=$(T logs "$1" --task actor.0)
  rollout=$(T logs "$1" --task rollout.0)
  echo "$actor"; echo "$rollout"
  [[ "$actor" == *"actor CVD="*" mine=a job=$2"* ]] || fail "actor output: $actor"
  [[ "$rollout" == *"rollout CVD="*" mine=r job=$2"* ]] || fail "rollout output: $rollout"
  cvd=${actor#*CVD=}; cvd=${cvd%% *}
  [[ "$rollout" == *"CVD=$cvd "* && "$cvd" == *,* ]] || fail "colocated roles saw different GPUs: $actor / $rollout"
  pass "both roles ran in batch job $2 on the same 2 GPUs ($cvd) with their own environment"
}

nothing_left() {  # BATCH
  wait_for 20 "batch job $1 gone" bash -c "[[ -z \$(squeue -h -j $1 -o %i 2>/dev/null) ]]"
  pass "batch job $1 and its steps are gone"
}

# Submits $SCRATCH/job.json and waits until its batch job runs two steps;
# sets id (the tandem job) and batch (the Slurm job, cancelled at exit).
submit_running() {
  id=$(T submit "$SCRATCH/job.json" | tail -1)
  wait_for 10 "batch job of $id" bash -c "[[ -n \$(squeue -h --name=$id -o %i) ]]"
  batch=$(batch_of "$id")
  CLEANUPS+=("scancel $batch")
  wait_for 30 "two steps of $id" bash -c "[[ \$(squeue -h --steps -j $batch -o %j 2>/dev/null | grep -vc '^batch$') -ge 2 ]]"
}

# An srun in front of the real one, in tandemd's PATH: for the actor's step
# it logs "start PID", sleeps $1 s (only on its first actor call when $2 is
# "once"), logs "exec PID" and runs the real srun.
slow_srun() {
  mkdir -p "$SCRATCH/bin"
  cat >"$SCRATCH/bin/srun" <<SH
#!/bin/bash
for a; do
  if [[ \$a == --job-name=*.actor.0.* ]]; then
    echo "start \$\$" >>"$SCRATCH/actor-srun.log"
    if [[ "${2:-}" != once || ! -e "$SCRATCH/slept" ]]; then
      touch "$SCRATCH/slept"
      sleep $1 & s=\$!
      trap 'kill \$s; exit 143' TERM
      wait \$s
    fi
    echo "exec \$\$" >>"$SCRATCH/actor-srun.log"
  fi
done
exec $(command -v srun) "\$@"
SH
  chmod +x "$SCRATCH/bin/srun"
  export PATH="$SCRATCH/bin:$PATH"
}

# Kills the running daemon, starts one that kills itself right after
# spawning the first step's srun, submits $SCRATCH/job.json (sets id and
# batch) and waits until that daemon is dead.
crash_after_step_start() {
  kill -9 "$DPID"
  wait "$DPID" 2>/dev/null || true
  TANDEM_TEST_FAULTS=slurm.after_step_start start_submit_daemon
  id=$(T submit "$SCRATCH/job.json" | tail -1)
  wait_for 30 "tandemd to kill itself after the first step start" bash -c "! kill -0 $DPID 2>/dev/null"
  wait "$DPID" 2>/dev/null || true
  batch=$(batch_of "$id")
  CLEANUPS+=("scancel $batch")
  grep -q "killing tandemd after starting step=$id.actor.0" "$SCRATCH/tandemd.log" || fail "fault point not reached"
}

start_submit_daemon
case $CASE in
  run)
    # Another job holds GPUs 0,1: the batch job gets 2,3, and the job's
    # logical devices 0,1 must be mapped onto them.
    holder=$(sbatch --parsable --job-name=tandem-test-holder --output=/dev/null --ntasks=1 --gres=gpu:2 \
      --time=5 --wrap="sleep 300")
    CLEANUPS+=("scancel $holder")
    wait_for 30 "holder $holder running" bash -c "squeue -h -j $holder -o %T | grep -q RUNNING"
    # A second job holds GPUs 2,3 for 4 s: the batch job pends for Resources.
    brief=$(sbatch --parsable --job-name=tandem-test-brief --output=/dev/null --ntasks=1 --gres=gpu:2 \
      --time=5 --wrap="sleep 4")
    CLEANUPS+=("scancel $brief")
    wait_for 30 "brief holder $brief running" bash -c "squeue -h -j $brief -o %T | grep -q RUNNING"
    spec 2
    id=$(T submit "$SCRATCH/job.json" | tail -1)
    wait_for 10 "batch job of $id" bash -c "[[ -n \$(squeue -h --name=$id -o %i) ]]"
    batch=$(batch_of "$id")
    CLEANUPS+=("scancel $batch")
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    grep -q "batch submitted job=$batch tandem_job=$id api=" "$SCRATCH/tandemd.log" || fail "submit not logged"
    [[ $API == auto ]] || grep -q "batch submitted job=$batch tandem_job=$id api=$API" "$SCRATCH/tandemd.log" ||
      fail "batch job not submitted through api=$API"
    grep -q "batch job=$batch tandem_job=$id state=PENDING reason=Resources" "$SCRATCH/tandemd.log" ||
      fail "pending state with Slurm's reason not logged"
    grep -q "batch job=$batch tandem_job=$id state=RUNNING" "$SCRATCH/tandemd.log" || fail "running not logged"
    pass "batch job $batch (api=$API) pending (Resources) then running, logged"
    check_outputs "$id" "$batch"
    [[ $(T logs "$id" --task actor.0) == *"CVD=2,3 "* ]] || fail "logical devices not mapped onto the batch job's GPUs 2,3"
    pass "logical devices 0,1 ran on the batch job's GPUs 2,3"
    nothing_left "$batch"
    ;;
  cancel)
    spec 300 "\"sbatch_args\": [\"--comment=tandem-test-$$\"]"
    submit_running  # sets id and batch
    [[ $(scontrol show job "$batch" | grep -o 'Comment=[^ ]*') == "Comment=tandem-test-$$" ]] ||
      fail "sbatch_args did not reach batch job $batch"
    if [[ $API == lib ]]; then
      grep -q "tandem_job=$id has sbatch_args (no libslurm field): submitting with sbatch" "$SCRATCH/tandemd.log" ||
        fail "no sbatch fallback logged for sbatch_args"
      pass "sbatch_args: batch job $batch submitted with sbatch (logged), the argument reached it"
    fi
    T cancel "$id" >/dev/null
    wait_end "$id" 40
    [[ $(job_state "$id") == cancelled ]] || fail "job $id: $(T status "$id" --json)"
    nothing_left "$batch"
    ;;
  scancel)
    spec 300
    submit_running  # sets id and batch
    scancel "$batch"
    fails_cancelled_by_slurm "$id"  # sets st
    pass "batch job cancelled outside tandem: job failed with Slurm's reason ($(jq -r .detail <<<"$st"))"
    ;;
  scancel-clean)
    CLEAN_ON_TERM=1 spec 0
    submit_running  # sets id and batch
    scancel "$batch"
    fails_cancelled_by_slurm "$id"  # sets st
    # The roles exit 0 on the SIGTERM: such an exit is interrupted, never
    # succeeded, whichever task ends first (the other is then failed or
    # cancelled). A step whose record Slurm's teardown beat ends by the signal
    # with Slurm's banner instead; either way no task succeeded.
    [[ -z $(jq -r '.tasks[] | select(.state == "succeeded") | .name' <<<"$st") ]] || fail "a task of $id succeeded: $st"
    bad=$(jq -c '[.tasks[] | select((.last_exit.exit_code == 0 and .last_exit.interrupted == true) or
                                    ((.last_exit.detail // "") | contains("CANCELLED")) | not) | .name]' <<<"$st")
    [[ $bad == '[]' ]] || fail "tasks of $id neither interrupted nor ended by Slurm: $bad ($st)"
    clean=$(jq -r '[.tasks[] | select(.last_exit.interrupted == true) | .name] | join(",")' <<<"$st")
    pass "clean exits after an outside scancel: job failed; interrupted: ${clean:-none (every record lost to the teardown)}"
    ;;
  reservation)
    res=tandem-submit-res-$$
    scontrol create reservation ReservationName="$res" StartTime=now Duration=5 Users=root \
      Nodes="$TANDEM_SLURM_NODE" Flags=IGNORE_JOBS >/dev/null
    CLEANUPS+=("for i in \$(seq 50); do scontrol delete ReservationName=$res 2>/dev/null && break; sleep 0.2; done")
    spec 0 "\"reservation\": \"$res\""
    id=$(T submit "$SCRATCH/job.json" | tail -1)
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    batch=$(batch_of "$id")
    CLEANUPS+=("scancel $batch")
    out=$(T logs "$id" --task actor.0)
    [[ "$out" == *"job=$batch"* ]] || fail "actor did not run in batch job $batch: $out"
    [[ $(scontrol show job "$batch" | grep -o 'Reservation=[^ ]*') == "Reservation=$res" ]] ||
      fail "batch job $batch is not in reservation $res: $(scontrol show job "$batch")"
    pass "the batch job ran in reservation $res"
    ;;
  restart)
    spec 8
    submit_running  # sets id and batch
    kill -9 "$DPID"
    wait "$DPID" 2>/dev/null || true
    [[ -n $(live_batch "$id") ]] || fail "batch job died with tandemd"
    pass "batch job $batch survives kill -9 of tandemd"
    start_submit_daemon
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    grep -q "reattached task=$id.actor.0 batch job=$batch" "$SCRATCH/tandemd.log" || fail "no re-attach by id logged"
    check_outputs "$id" "$batch"
    [[ $(squeue -h --states=all --name="$id" -o %i | sort -u | wc -l) == 1 ]] || fail "a second batch job was submitted"
    nothing_left "$batch"
    ;;
  rejected)
    spec 0 '"partition": "no-such-partition"'
    id=$(T submit "$SCRATCH/job.json" | tail -1)
    wait_end "$id" 30
    st=$(T status "$id" --json)
    [[ $(jq -r .state <<<"$st") == failed ]] || fail "job $id: $st"
    [[ "${st,,}" == *"invalid partition"* ]] || fail "Slurm's refusal missing: $st"
    [[ $API != cli || "$st" == *"sbatch"* ]] || fail "sbatch's words missing: $st"
    [[ $API != lib || "$st" == *"slurm_submit_batch_job"* ]] || fail "libslurm's words missing: $st"
    [[ -z $(squeue -h --states=all --name="$id" -o %i) ]] || fail "a batch job exists for $id"
    pass "sbatch refused the batch job: the job failed with sbatch's words ($(jq -r .detail <<<"$st"))"
    ;;
  timelimit)
    spec 300
    submit_running  # sets id and batch
    # Slurm's minimum limit is a minute: 0 makes its next sweep (<= 30 s) end it.
    scontrol update JobId="$batch" TimeLimit=0 || fail "scontrol update TimeLimit of $batch"
    wait_end "$id" 90
    st=$(T status "$id" --json)
    [[ $(jq -r .state <<<"$st") == failed ]] || fail "job $id: $st"
    [[ "$st" == *"DUE TO TIME LIMIT"* ]] || fail "Slurm's time-limit banner missing: $st"
    [[ "$st" == *"slurm batch job $batch TIMEOUT"* || ($API == cli && "$st" == *"(TimeLimit)"*) ]] ||
      fail "the batch job's TIMEOUT missing: $st"
    pass "batch job $batch ran out of time: the job failed with Slurm's reason ($(jq -r .detail <<<"$st" | head -c 200))"
    nothing_left "$batch"
    ;;
  crash-window)
    spec 8
    crash_after_step_start  # sets id and batch
    start_submit_daemon
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    grep -q "adopted step=$id.actor.0.* task=$id.actor.0 batch job=$batch" "$SCRATCH/tandemd.log" ||
      fail "the step was not adopted by name"
    pass "the step started just before the crash was found by name and adopted"
    check_outputs "$id" "$batch"
    [[ $(T logs "$id" --task actor.0 | grep -c "actor CVD=") == 1 ]] || fail "actor ran more than once"
    pass "actor ran exactly once"
    [[ $(squeue -h --states=all --name="$id" -o %i | sort -u | wc -l) == 1 ]] || fail "a second batch job was submitted"
    nothing_left "$batch"
    ;;
  lost-submit)
    kill -9 "$DPID"
    wait "$DPID" 2>/dev/null || true
    TANDEM_TEST_FAULTS=slurm.after_submit start_submit_daemon
    spec 2
    id=$(T submit "$SCRATCH/job.json" | tail -1)
    wait_for 30 "tandemd to kill itself after the submit" bash -c "! kill -0 $DPID 2>/dev/null"
    wait "$DPID" 2>/dev/null || true
    grep -q "killing tandemd before recording batch job=" "$SCRATCH/tandemd.log" || fail "fault point not reached"
    batch=$(batch_of "$id")
    [[ -n $batch ]] || fail "no batch job named $id"
    CLEANUPS+=("scancel $batch")
    start_submit_daemon
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    grep -q "reattached task=$id.actor.0 batch job=$batch (not started yet)" "$SCRATCH/tandemd.log" ||
      fail "the task was not re-attached to batch job $batch found by name"
    check_outputs "$id" "$batch"
    [[ $(squeue -h --states=all --name="$id" -o %i | sort -u | wc -l) == 1 ]] || fail "a second batch job was submitted"
    nothing_left "$batch"
    ;;
  slow-step)
    slow_srun 5
    spec 8
    crash_after_step_start  # sets id and batch
    start_submit_daemon     # returns once tandemd answers its API
    grep -q "task=$id.actor.0 step=$id.actor.0.*: srun client pids=.* alive, step not created yet: waiting" \
      "$SCRATCH/tandemd.log" || fail "no wait for the living srun client logged"
    ! grep -q "task=$id.actor.0 step=.*: adopt (" "$SCRATCH/tandemd.log" ||
      fail "the step was resolved before the API answered: nothing shows the API answers during re-attach"
    grep -q "recovered jobs=1 reattached_tasks=2" "$SCRATCH/tandemd.log" || fail "not both tasks re-attached"
    [[ $(job_state "$id") == running ]] || fail "job $id not running while re-attaching: $(T status "$id" --json)"
    pass "tandemd answers its API while it waits for the srun client still creating the step"
    wait_for 20 "the actor's step adopted" grep -q "adopted step=$id.actor.0.* task=$id.actor.0 batch job=$batch" \
      "$SCRATCH/tandemd.log"
    [[ $(grep -c "^exec " "$SCRATCH/actor-srun.log") == 1 ]] || fail "srun ran for the actor more than once: $(cat "$SCRATCH/actor-srun.log")"
    pass "the step created after the restart was adopted, srun ran once for the actor"
    step=$(squeue -h --steps -j "$batch" -o '%i %j' | awk -v n="$id.actor.0." 'index($2, n) == 1 {print $1}')
    [[ -n $step ]] || fail "the actor's step is not in squeue"
    scancel "$step"
    fails_cancelled_by_slurm "$id"  # sets st
    pass "the adopted step cancelled by scancel: the job failed with Slurm's reason ($(jq -r .detail <<<"$st" | head -c 200))"
    ;;
  slow-step-timeout)
    slow_srun 300 once
    export TANDEM_TEST_SLURM_STEP_CREATE_WAIT_MS=2000
    spec 2
    crash_after_step_start  # sets id and batch
    # The daemon died right after spawning the wrapper, which may not have
    # logged its start yet (a loaded machine).
    wait_for 20 "the first srun wrapper's start" grep -q "^start " "$SCRATCH/actor-srun.log"
    first=$(awk '/^start /{print $2; exit}' "$SCRATCH/actor-srun.log")
    alive "$first" || fail "the first srun wrapper is not running"
    start_submit_daemon
    wait_end "$id" 60
    [[ $(job_state "$id") == succeeded ]] || fail "job $id: $(T status "$id" --json)"
    grep -q "task=$id.actor.0 step=.*: no step after 2000 ms: stopping its srun client" "$SCRATCH/tandemd.log" ||
      fail "stopping the srun client not logged"
    grep -q "task=$id.actor.0 step=.*: never-started (its srun client ended before creating the step)" \
      "$SCRATCH/tandemd.log" || fail "never-started verdict not logged"
    ! alive "$first" || fail "the first srun client $first still lives"
    pass "the srun client stuck creating the step was stopped, then the task started again"
    [[ $(grep -c "^exec " "$SCRATCH/actor-srun.log") == 1 ]] || fail "srun ran for the actor more than once: $(cat "$SCRATCH/actor-srun.log")"
    [[ $(T logs "$id" --task actor.0 | grep -c "actor CVD=") == 1 ]] || fail "actor ran more than once"
    pass "actor ran exactly once"
    nothing_left "$batch"
    ;;
  *) fail "unknown case $CASE" ;;
esac
