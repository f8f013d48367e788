/* The handoff protocol as a Promela model (docs/handoff.md;
 * docs/handoff.md "Model status"). One daemon and three workers (actor,
 * rollout, teacher) on one GPU, with lost commands and answers, duplicate
 * answers, timeouts (real and spurious) with retries of the same command id,
 * and worker crashes followed by a restart. Checked by model/check.sh
 * (spin -a; cc -DSAFETY -DCOLLAPSE; pan, exhaustive, no bitstate) for:
 *   - no GPU over capacity, by the ledger (daemon) nor in reality (workers)
 *   - no inference role resumed while actor optimizer/grads are resident (H4)
 *   - exports never freed before every reader acknowledged its load (H8),
 *     and never read after they were freed (H6)
 *   - CUDA graphs restored only over the last published version (H9, H10)
 *   - no deadlock (invalid end states), and, in a second run (-DNP, pan -l),
 *     no non-progress cycle
 *
 * Faithful to the C++ engine (transition.cc):
 *   - The daemon is one table-driven loop: the stage order is the table
 *     `stage[]` (init, from ordering_rules' StageOrder();
 *     model_correspondence_test checks it), recovery runs the resume/load
 *     stages of that same table (RecoveryStages()). Per stage the commands
 *     are computed from the ledger like CommandFor(): a tag already where
 *     the phase wants it gives no command, a stage without commands is
 *     skipped; all commands of a stage go out at once and the stage ends
 *     when every one was answered.
 *   - Fault (T8 timeout or error answer, T9 death): the worker's restore
 *     set gains what the ledger says it held, minus what it was releasing,
 *     minus ipc_exports (transition.cc replaces the set instead: a second
 *     fault before recovery ends loses it; mutant T11 shows the
 *     consequence); an actor fault during SYNC resets the published
 *     version; the ledger forgets the worker. With
 *     on_fault=restart (T11) it is restarted and says hello carrying its
 *     residency (T12); when nothing is in flight, recovery resumes what it
 *     held (graphs last) and reloads the last published version; then the
 *     interrupted transition runs again from its first stage (T13).
 *     -DON_FAULT_FAIL models on_fault=fail instead (T10); check.sh runs both.
 *   - The executor's retries re-send the same command id; a worker answers
 *     a repeated id with its first answer, without running it again
 *     (workers/runtime/control_client.cc).
 * Abstractions: one GPU of capacity CAP; each tag is one unit, except the
 * actor's training state TR (grads + optimizer + activations), two units;
 * the controller asks for ROLLOUT, TEACHER(0), TRAIN, SYNC(v) CYCLES times,
 * then ROLLOUT once more (T1; a repeated or refused request, T2/T3, never
 * reaches the stage loop). A death between two phases is noticed during the
 * next transition (C++ recovers the settled phase first). The kill of a
 * timed-out worker completes before its replacement says hello. A
 * load_weights whose exports are gone (the actor died) is answered with an
 * error. A recovery reload (RELOAD) may read a durable copy (load_weights
 * source file:), since the exports may be freed by then.
 * Bounds (override with spin -D, e.g. check.sh with SPIN_DEFINES=-DMAXCRASH=2):
 * CYCLES, MAXCRASH, MAXLOSS, MAXSPUR below.
 *
 * The C++ transition ids (T1..T16) and ordering rule ids (H1..H14) appear as
 * comments on the statements that implement or check them;
 * model_correspondence_test checks that each id of the C++ tables is here.
 * Mutants (check.sh --mutant NAME, spin -DMUTANT_NAME) break one thing each
 * and must be caught (ctest handoff_spin_model_mutants):
 *   H4    release_actor after resume_inference     -> the ledger refuses (T15)
 *   H8    release_exports before load_weights      -> exports freed unread
 *   H10   resume_graphs before load_weights        -> graphs over stale weights
 *         (only after a rollout restart: the recovery path)
 *   RETRY no executor timer                        -> deadlock (invalid end state)
 *   T11   a second fault overwrites the restore set, as transition.cc's
 *         Fault() does today -> the actor publishes without its params
 */

#define ACTOR   0
#define ROLLOUT 1
#define TEACHER 2
#define NW      3
#define BIT(w)  (1 << (w))

/* tags (bit masks) */
#define W  1   /* weights */
#define KV 2   /* kv_cache */
#define G  4   /* cuda_graph */
#define P  8   /* params */
#define TR 16  /* grads + optimizer + activations (2 units) */
#define X  32  /* ipc_exports */
#define BYTES(t) (((t) & W) + (((t) & KV) >> 1) + (((t) & G) >> 2) + (((t) & P) >> 3) + (((t) & TR) >> 3) + (((t) & X) >> 5))

/* bounds */
#define CAP 3
#ifndef CYCLES
#define CYCLES 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1   /* worker crashes */
#endif
#ifndef MAXLOSS
#define MAXLOSS 1    /* lost commands or answers */
#endif
#ifndef MAXSPUR
#define MAXSPUR 1    /* timeouts of a slow (not lost) exchange */
#endif
#define MAXDUP 1     /* duplicated answers */
#define RETRIES 1    /* re-sends of the same id before Timeout */

/* phases (PhaseKind) and stages (Stage, ordering_rules.h) */
#define PH_ROLLOUT 0
#define PH_TEACHER 1
#define PH_TRAIN   2
#define PH_SYNC    3
#define S_pause             0
#define S_release_inference 1
#define S_release_actor     2
#define S_publish           3
#define S_resume_actor      4
#define S_resume_inference  5
#define S_load_weights      6
#define S_release_exports   7
#define S_resume_graphs     8
#define S_continue          9
#define NSTAGES  10
#define NRSTAGES 4
#define M_TRANSITION 0
#define M_RECOVERING 1

mtype = { NONE, PAUSE, RELEASE, RESUME, PUBLISH, LOAD, RELOAD, CONT,  /* commands */
          ANSWER, TIMEOUT, DIED };                               /* the daemon's events */

chan cmd[NW] = [3] of { mtype, byte, byte, byte };  /* kind, tags, version, command id */
chan ack = [6] of { byte, byte, byte, bool };       /* worker, command id, tags held, ok */

/* ---- reality: what the workers hold and did ---------------------------- */
byte held[NW];     /* tags resident in each worker */
bool dead[NW];     /* crashed, not yet restarted */
bool wrun[NW];     /* continued and not paused since */
byte last[NW];     /* last command id executed: a repeat gets the first answer again */
bool lastok[NW];   /* ... whether that answer was an ack (else an error) */
byte wver;         /* weights version the rollout (the reader) holds */
byte xver;         /* version held in the actor's exports */
byte pubv;         /* the last version the actor published */
byte acked;        /* ghost: the highest version whose load the daemon saw acknowledged */
byte crashes, losses, spurious, dups;
bool lost[NW];     /* a command to / answer from this worker was lost */
bool done;

/* ---- the daemon: GroupState --------------------------------------------- */
byte stage[NSTAGES];   /* StageOrder() */
byte rstage[NRSTAGES]; /* RecoveryStages() */
byte rel[12];          /* choreography: tags released, [phase * NW + worker] */
byte res[12];          /* tags resumed */
byte led[NW];          /* the ledger: tags resident by the last answer */
bool running[NW];
byte restore[NW];
byte dloaded;          /* the rollout's loaded_version */
byte pubd, pubbefore;  /* published_version, published_before */
byte target, tver, mode;
mtype ck[NW];          /* outstanding: one command per worker at most */
byte ct[NW], cv[NW], cid[NW], tries[NW];
byte pend;             /* workers with an outstanding command */
byte tosend;           /* workers whose command is (re-)sent next */
byte nextid;
bool faulted, failed;

/* the executor's timer fires: the exchange was lost, or was slow (bounded) */
#ifdef MUTANT_RETRY   /* no timer: a lost command or answer is waited for forever */
#define TIMES_OUT(w) false
#else
#define TIMES_OUT(w) (lost[w] || spurious < MAXSPUR)
#endif
#define LEDGER (BYTES(led[0]) + BYTES(led[1]) + BYTES(led[2]))
#define TOTAL  (BYTES(held[0]) + BYTES(held[1]) + BYTES(held[2]))
#define ACTIVE(w) ((target == PH_ROLLOUT && w == ROLLOUT) || (target == PH_TEACHER && w == TEACHER) || (target == PH_TRAIN && w == ACTOR))

proctype Worker(byte me) {
  mtype k; byte t, v, id; bool ok;  /* ok: the answer is an ack, not an error */
end:
  do
  :: atomic { !dead[me] && nempty(cmd[me]) -> cmd[me]?k,t,v,id;
       ok = true;
       if
       :: id != last[me] ->
          last[me] = id;
          if
          :: k == PAUSE -> wrun[me] = false
          :: k == RELEASE ->
             assert(!wrun[me]);                                     /* H1 H2 */
             if
             :: (t & X) -> assert(acked >= xver)                    /* H8 */
             :: else -> skip
             fi;
             held[me] = held[me] & ~t
          :: k == RESUME ->
             if
             :: me != ACTOR -> assert((held[ACTOR] & TR) == 0)       /* H4 H11 */
             :: else -> skip
             fi;
             if
             :: (t & G) -> assert(wver == pubv && (held[me] & W))  /* H9 H10 */
             :: else -> skip
             fi;
             held[me] = held[me] | t;
             assert(TOTAL <= CAP)                                   /* capacity, in reality */
          :: k == PUBLISH -> assert(held[me] & P); held[me] = held[me] | X; xver = v; pubv = v  /* H6 */
          :: k == LOAD ->                                            /* H6 H7 */
             assert(held[me] & W);
             if
             :: (held[ACTOR] & X) && xver == v -> wver = v
             :: else -> ok = false   /* the exports are gone (the actor died): an error answer */
             fi
          :: k == RELOAD -> assert(v <= pubv && (held[me] & W)); wver = v   /* a version that was published */
          :: k == CONT ->                                           /* H12 H13 H14 */
             if
             :: me == ACTOR -> assert((held[me] & (P | TR)) == (P | TR))
             :: me == ROLLOUT -> assert(held[me] == (W | KV | G) && wver == pubv && (held[ACTOR] & X) == 0)
             :: me == TEACHER -> assert(held[me] == W)
             fi;
             wrun[me] = true
          fi;
          lastok[me] = ok
       :: else -> skip   /* a repeated id: the first answer again (control_client.cc);
                            its residency is still current: one command at a time */
       fi;
       if
       :: assert(nfull(ack)); ack!me,id,held[me],lastok[me]
       :: dups < MAXDUP -> dups++; assert(len(ack) < 5); ack!me,id,held[me],lastok[me]; ack!me,id,held[me],lastok[me]
       :: losses < MAXLOSS -> losses++; lost[me] = true           /* the answer is lost */
       fi;
       k = NONE; t = 0; v = 0; id = 0; ok = false                  /* (fewer states) */
     }
  :: atomic { !dead[me] && !done && crashes < MAXCRASH ->
       crashes++; dead[me] = true; held[me] = 0; wrun[me] = false;  /* the driver frees its memory */
       if :: me == ROLLOUT -> wver = 0 :: else -> skip fi
     }
  od
}

byte aw, aid, ah, ew, j, need;
bool aok;
mtype ev;

/* One event of a stage (inside the daemon's d_step): an answer (T4 T5 T7),
   a timeout (retry, or T8) or a death (T9), then the fault policy (T10, or
   T11 T12). */
inline handle() {
  if
  :: ev == ANSWER ->
     ew = NW;
     if
     :: (pend & BIT(aw)) && cid[aw] == aid && !aok ->           /* T8: an error answer */
        led[aw] = ah; pend = pend & ~BIT(aw); ew = aw   /* OnAnswer erases it first */
     :: (pend & BIT(aw)) && cid[aw] == aid && aok ->            /* T4 T5 */
        led[aw] = ah; pend = pend & ~BIT(aw);
        assert(LEDGER <= CAP);                                    /* capacity, by the ledger */
        if
        :: ck[aw] == PAUSE -> running[aw] = false
        :: ck[aw] == CONT -> running[aw] = true
        :: ck[aw] == LOAD || ck[aw] == RELOAD -> dloaded = cv[aw]; if :: cv[aw] > acked -> acked = cv[aw] :: else -> skip fi
        :: ck[aw] == PUBLISH -> if :: cv[aw] > pubd -> pubd = cv[aw] :: else -> skip fi
        :: else -> skip
        fi
     :: else -> skip                                              /* T7: duplicate or late */
     fi
  :: ev == TIMEOUT && tries[ew] < RETRIES ->   /* timed out: re-send the same id */
     tries[ew]++; tosend = tosend | BIT(ew); lost[ew] = false;
     ew = NW
  :: else -> skip   /* T8 (timeout after the retries) or T9 (died) on ew */
  fi;
  if
  :: ew < NW ->
     /* Fault(): restore what it held, minus what it was releasing, minus exports */
#ifdef MUTANT_T11
     restore[ew] = 0;   /* transition.cc today: a second fault overwrites the restore set */
#endif
     if
     :: (pend & BIT(ew)) && ck[ew] == RELEASE -> restore[ew] = restore[ew] | (led[ew] & ~ct[ew] & ~X)
     :: else -> restore[ew] = restore[ew] | (led[ew] & ~X)
     fi;
     if
     :: ew == ACTOR && target == PH_SYNC -> pubd = pubbefore    /* its exports are gone: publish again */
     :: else -> skip
     fi;
     if :: ew == ROLLOUT -> dloaded = 0 :: else -> skip fi;
     running[ew] = false; pend = pend & ~BIT(ew); tosend = tosend & ~BIT(ew);
     lost[ew] = false; led[ew] = 0;                              /* Ledger::Forget */
#ifdef ON_FAULT_FAIL
     failed = true                                                /* T10: the group fails */
#else
     /* T11: restart the task: the old process is killed (its memory freed,
        its connection and what was queued on it gone) and a new one starts */
     held[ew] = 0; last[ew] = 0; lastok[ew] = false; dead[ew] = false; wrun[ew] = false;
     if :: ew == ROLLOUT -> wver = 0 :: else -> skip fi;
     do :: nempty(cmd[ew]) -> cmd[ew]?_,_,_,_ :: empty(cmd[ew]) -> break od;
     led[ew] = held[ew];                                          /* T12 T14: hello, with its residency */
     faulted = true
#endif
  :: else -> skip
  fi;
  /* forget what no longer matters (fewer states, same behaviour) */
  j = 0;
  do
  :: j < NW && !(pend & BIT(j)) -> ck[j] = NONE; ct[j] = 0; cv[j] = 0; cid[j] = 0; tries[j] = 0; j++
  :: j < NW && (pend & BIT(j)) -> j++
  :: j == NW -> break
  od;
  j = 0; aw = 0; aid = 0; ah = 0; aok = false; ev = NONE; ew = 0
}

/* CommandFor(): the command of worker j in stage st, from the ledger. */
inline command_for(st) {
  ck[j] = NONE; ct[j] = 0; cv[j] = 0;
  if
  :: mode == M_RECOVERING && restore[j] != 0 ->
     if
     :: st == S_resume_actor && j == ACTOR && (restore[j] & ~led[j]) -> ck[j] = RESUME; ct[j] = restore[j] & ~led[j]
     :: st == S_resume_inference && j != ACTOR && (restore[j] & ~led[j] & ~G) -> ck[j] = RESUME; ct[j] = restore[j] & ~led[j] & ~G
     :: st == S_load_weights && j == ROLLOUT && (restore[j] & W) && pubd > 0 && dloaded < pubd -> ck[j] = RELOAD; cv[j] = pubd
     :: st == S_resume_graphs && j != ACTOR && (restore[j] & ~led[j] & G) -> ck[j] = RESUME; ct[j] = G
     :: else -> skip
     fi
  :: mode == M_RECOVERING && restore[j] == 0 -> skip
  :: mode == M_TRANSITION ->
     if
     :: st == S_pause && running[j] && !ACTIVE(j) -> ck[j] = PAUSE                          /* H1 H2 */
     :: st == S_release_inference && j != ACTOR && (rel[target * NW + j] & led[j]) ->
        ck[j] = RELEASE; ct[j] = rel[target * NW + j] & led[j]                                /* H3 H5 */
     :: st == S_release_actor && j == ACTOR && (rel[target * NW + j] & led[j] & ~X) ->
        ck[j] = RELEASE; ct[j] = rel[target * NW + j] & led[j] & ~X                           /* H4 */
     :: st == S_publish && j == ACTOR && target == PH_SYNC && pubd < tver -> ck[j] = PUBLISH; cv[j] = tver  /* H6 H9 */
     :: st == S_resume_actor && j == ACTOR && (res[target * NW + j] & ~led[j]) ->
        ck[j] = RESUME; ct[j] = res[target * NW + j] & ~led[j]                                /* H3 H12 */
     :: st == S_resume_inference && j != ACTOR && (res[target * NW + j] & ~led[j] & ~G) ->
        ck[j] = RESUME; ct[j] = res[target * NW + j] & ~led[j] & ~G                           /* H4 H5 H7 */
     :: st == S_load_weights && j == ROLLOUT && target == PH_SYNC && dloaded < tver -> ck[j] = LOAD; cv[j] = tver  /* H6 H7 H8 */
     :: st == S_release_exports && j == ACTOR && (rel[target * NW + j] & led[j] & X) -> ck[j] = RELEASE; ct[j] = X  /* H8 H14 */
     :: st == S_resume_graphs && j != ACTOR && (res[target * NW + j] & ~led[j] & G) -> ck[j] = RESUME; ct[j] = G   /* H9 H10 H11 H13 */
     :: st == S_continue && !running[j] && ACTIVE(j) -> ck[j] = CONT                         /* H12 H13 H14 */
     :: else -> skip
     fi
  fi
}

/* Advance(): finish the stage that was waited for (or start the
   transition), then run stages until one has commands, which are sent, or
   none is left. */
inline advance() {
  if
  :: faulted -> faulted = false; fresh = false; mode = M_RECOVERING; si = 0  /* MaybeRecover */
  :: !faulted && fresh -> fresh = false
  :: else -> si++
  fi;
  do
  :: mode == M_RECOVERING && si == NRSTAGES ->                     /* T13: recovery done: re-run */
     restore[0] = 0; restore[1] = 0; restore[2] = 0; mode = M_TRANSITION; si = 0
  :: mode == M_TRANSITION && si == NSTAGES -> reached = true; break  /* T6: the phase is reached */
  :: else ->
     if :: mode == M_RECOVERING -> st = rstage[si] :: else -> st = stage[si] fi;
     j = 0;
     do
     :: j < NW ->
        command_for(st);
        if
        :: ck[j] != NONE ->
           nextid++; assert(nextid < 255);
           cid[j] = nextid; tries[j] = 0; lost[j] = false; pend = pend | BIT(j);
           if :: ck[j] == RESUME -> need = need + BYTES(ct[j]) :: else -> skip fi
        :: else -> skip
        fi;
        j++
     :: else -> break
     od;
     j = 0;
     if
     :: pend != 0 && LEDGER + need > CAP ->                         /* T15: the ledger refuses */
        /* C++: the group fails if on_fault "fail" was given or it is
         * recovering, else it settles in INIT and the job goes on
         * (docs/handoff.md "Refusals"). Not explored here: the default
         * choreography always fits, so a refusal is a violation. */
        failed = true; assert(LEDGER + need <= CAP)
     :: else -> skip
     fi;
     need = 0; tosend = pend;
     if :: pend != 0 -> break :: else -> si++ fi                   /* T5: its commands go out */
  od
}

proctype Daemon() {
  byte n = 0, si = 0, st;
  bool fresh, reached;
  do
  :: n <= 4 * CYCLES && !failed ->
     d_step {                                                       /* T1: the request is accepted */
       target = n % 4; tver = n / 4 + 1; pubbefore = pubd; mode = M_TRANSITION;
       si = 0; fresh = true; reached = false
     };
wait:                                                               /* the events of one stage */
     if
     :: failed || reached -> goto phase_end
     :: tosend != 0 ->
        atomic {
          if :: (tosend & 1) -> ew = 0 :: (tosend & 3) == 2 -> ew = 1 :: (tosend & 3) == 0 -> ew = 2 fi;
          tosend = tosend & ~BIT(ew);
          if
          :: assert(nfull(cmd[ew])); cmd[ew]!ck[ew],ct[ew],cv[ew],cid[ew]
          :: losses < MAXLOSS -> losses++; lost[ew] = true           /* the command is lost */
          fi;
          ew = 0
        };
        goto wait
     :: !failed && !reached && tosend == 0 && pend == 0 ->
progress:
        d_step { advance() };
        goto wait
     :: atomic { tosend == 0 && nempty(ack) -> ack?aw,aid,ah,aok; ev = ANSWER }
     :: atomic { (pend & 1) && TIMES_OUT(0) -> ew = 0; ev = TIMEOUT; if :: lost[0] -> skip :: else -> spurious++ fi }  /* T8 */
     :: atomic { (pend & 2) && TIMES_OUT(1) -> ew = 1; ev = TIMEOUT; if :: lost[1] -> skip :: else -> spurious++ fi }
     :: atomic { (pend & 4) && TIMES_OUT(2) -> ew = 2; ev = TIMEOUT; if :: lost[2] -> skip :: else -> spurious++ fi }
     :: atomic { dead[0] && !reached -> ew = 0; ev = DIED }          /* T9: a worker died */
     :: atomic { dead[1] && !reached -> ew = 1; ev = DIED }
     :: atomic { dead[2] && !reached -> ew = 2; ev = DIED }
     fi;
     d_step { handle() };
     goto wait;
phase_end:
     n++
  :: n > 4 * CYCLES || failed -> break
  od;
  done = true
  /* T2 T3 T16: repeated, refused and ignored requests change nothing (not modelled) */
}

init {
  byte i, k = 0;
  d_step {
    /* StageOrder() (model_correspondence_test compares these lines with it) */
    stage[0] = S_pause;
    stage[1] = S_release_inference;
    stage[2] = S_release_actor;
    stage[3] = S_publish;
    stage[4] = S_resume_actor;
    stage[5] = S_resume_inference;
    stage[6] = S_load_weights;
    stage[7] = S_release_exports;
    stage[8] = S_resume_graphs;
    stage[9] = S_continue;
#ifdef MUTANT_H4   /* the actor releases its training state after inference resumes */
    stage[2] = S_resume_inference; stage[5] = S_release_actor;
#endif
#ifdef MUTANT_H8   /* exports are freed before the reader loads */
    stage[6] = S_release_exports; stage[7] = S_load_weights;
#endif
#ifdef MUTANT_H10  /* graphs come back before the weights are (re)loaded */
    stage[6] = S_resume_graphs; stage[7] = S_load_weights; stage[8] = S_release_exports;
#endif
    /* RecoveryStages(): the resume and load stages, in StageOrder() */
    i = 0;
    do
    :: i < NSTAGES ->
       if
       :: stage[i] == S_resume_actor || stage[i] == S_resume_inference || stage[i] == S_load_weights ||
          stage[i] == S_resume_graphs -> rstage[k] = stage[i]; k++
       :: else -> skip
       fi;
       i++
    :: else -> break
    od;
    /* DefaultChoreography() */
    rel[PH_ROLLOUT * NW + ACTOR] = P | TR | X;   rel[PH_ROLLOUT * NW + TEACHER] = W;
    res[PH_ROLLOUT * NW + ROLLOUT] = W | KV | G;
    rel[PH_TEACHER * NW + ACTOR] = P | TR | X;   rel[PH_TEACHER * NW + ROLLOUT] = W | KV | G;
    res[PH_TEACHER * NW + TEACHER] = W;
    rel[PH_TRAIN * NW + ROLLOUT] = W | KV | G;   rel[PH_TRAIN * NW + TEACHER] = W;
    res[PH_TRAIN * NW + ACTOR] = P | TR;
    rel[PH_SYNC * NW + ACTOR] = TR | X;
    res[PH_SYNC * NW + ROLLOUT] = W
  };
  /* T14: every worker said hello (holding nothing) before the first request */
  atomic {
    run Worker(ACTOR);
    run Worker(ROLLOUT);
    run Worker(TEACHER);
    run Daemon()
  }
}
