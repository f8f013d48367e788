/* The handoff protocol as a Promela model (DESIGN.md "Handoff engine";
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
 *   - Fault (T8, T9): the worker's restore set is what the ledger says it
 *     held, minus what it was releasing, minus ipc_exports; an actor fault
 *     during SYNC resets the published version; the ledger forgets it. With
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
 * reaches the stage loop). The kill of a timed-out worker completes before
 * its replacement says hello. A recovery reload (RELOAD) may read a durable
 * copy (load_weights source file:), since the exports may be freed by then.
 *
 * The C++ transition ids (T1..T16) and ordering rule ids (H1..H14) appear as
 * comments on the statements that implement or check them;
 * model_correspondence_test checks that each id of the C++ tables is here.
 * Mutants (check.sh --mutant NAME, -DMUTANT_NAME) break one rule each and
 * must be caught: H4, H8, H10.
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
#define CYCLES 1
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
byte lastheld[NW]; bool lastok[NW];
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
          :: k == RELOAD -> assert(v == pubv && (held[me] & W)); wver = v
          :: k == CONT ->                                           /* H12 H13 H14 */
             if
             :: me == ACTOR -> assert((held[me] & (P | TR)) == (P | TR))
             :: me == ROLLOUT -> assert(held[me] == (W | KV | G) && wver == pubv && (held[ACTOR] & X) == 0)
             :: me == TEACHER -> assert(held[me] == W)
             fi;
             wrun[me] = true
          fi;
          lastok[me] = ok; lastheld[me] = held[me]
       :: else -> skip   /* a repeated id: the first answer again (control_client.cc) */
       fi;
       if
       :: assert(nfull(ack)); ack!me,id,lastheld[me],lastok[me]
       :: dups < MAXDUP -> dups++; assert(len(ack) < 5); ack!me,id,lastheld[me],lastok[me]; ack!me,id,lastheld[me],lastok[me]
       :: losses < MAXLOSS -> losses++; lost[me] = true           /* the answer is lost */
       fi
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

/* One event of a stage: an answer (T4 T5 T7), a timeout (retry, or T8) or
   a death (T9), then the fault policy (T10, or T11 T12). */
inline handle() {
  d_step {
    if
    :: ev == ANSWER ->
       ew = NW;
       if
       :: (pend & BIT(aw)) && cid[aw] == aid && !aok ->           /* T8: an error answer */
          led[aw] = ah; ew = aw
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
       held[ew] = 0; last[ew] = 0; dead[ew] = false; wrun[ew] = false;
       if :: ew == ROLLOUT -> wver = 0 :: else -> skip fi;
       do :: nempty(cmd[ew]) -> cmd[ew]?_,_,_,_ :: empty(cmd[ew]) -> break od;
       led[ew] = held[ew];                                          /* T12 T14: hello, with its residency */
       faulted = true
#endif
    :: else -> skip
    fi
  }
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

proctype Daemon() {
  byte n = 0, si = 0, st;
  do
  :: n <= 4 * CYCLES && !failed ->
     d_step {                                                       /* T1: the request is accepted */
       target = n % 4; tver = n / 4 + 1; pubbefore = pubd; mode = M_TRANSITION; si = 0
     }
stage_start:
     if
     :: failed -> goto phase_end
     :: !failed && mode == M_TRANSITION && si == NSTAGES -> goto phase_reached
     :: !failed && mode == M_RECOVERING && si == NRSTAGES ->
        d_step { restore[0] = 0; restore[1] = 0; restore[2] = 0; mode = M_TRANSITION; si = 0 };  /* T13 */
        goto stage_start
     :: !failed && si < NSTAGES && (mode == M_TRANSITION || si < NRSTAGES) -> skip
     fi;
     d_step {
       if :: mode == M_RECOVERING -> st = rstage[si] :: else -> st = stage[si] fi;
       pend = 0; need = 0; j = 0;
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
       tosend = pend;
       if
       :: LEDGER + need > CAP ->                                    /* T15: the ledger refuses */
          failed = true; assert(LEDGER + need <= CAP)  /* the default choreography always fits */
       :: else -> skip
       fi
     };
wait:                                                               /* one stage's events */
     if
     :: failed -> goto phase_end
     :: tosend != 0 ->
        atomic {
          if :: (tosend & 1) -> ew = 0 :: (tosend & 3) == 2 -> ew = 1 :: (tosend & 3) == 0 -> ew = 2 fi;
          tosend = tosend & ~BIT(ew);
          if
          :: assert(nfull(cmd[ew])); cmd[ew]!ck[ew],ct[ew],cv[ew],cid[ew]
          :: losses < MAXLOSS -> losses++; lost[ew] = true           /* the command is lost */
          fi
        };
        goto wait
     :: tosend == 0 && pend == 0 -> goto stage_done
     :: atomic { tosend == 0 && nempty(ack) -> ack?aw,aid,ah,aok; ev = ANSWER }
     :: (pend & 1) && (lost[0] || spurious < MAXSPUR) -> atomic { ew = 0; ev = TIMEOUT; if :: lost[0] -> skip :: else -> spurious++ fi }  /* T8 */
     :: (pend & 2) && (lost[1] || spurious < MAXSPUR) -> atomic { ew = 1; ev = TIMEOUT; if :: lost[1] -> skip :: else -> spurious++ fi }
     :: (pend & 4) && (lost[2] || spurious < MAXSPUR) -> atomic { ew = 2; ev = TIMEOUT; if :: lost[2] -> skip :: else -> spurious++ fi }
     :: dead[0] -> atomic { ew = 0; ev = DIED }                   /* T9: a worker died */
     :: dead[1] -> atomic { ew = 1; ev = DIED }
     :: dead[2] -> atomic { ew = 2; ev = DIED }
     fi;
     handle();
     goto wait;
stage_done:
     if
     :: faulted -> d_step { faulted = false; mode = M_RECOVERING; si = 0 }  /* MaybeRecover */
     :: else -> si++
     fi;
progress:
     goto stage_start;
phase_reached:                                                      /* T6 */
     skip;
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
