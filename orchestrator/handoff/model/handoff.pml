/* The handoff protocol as a Promela model (DESIGN.md "Handoff engine";
 * docs/handoff.md). One daemon and three workers (actor, rollout, teacher)
 * on one GPU, with lost commands and acks, duplicate acks, timeouts with
 * retries of the same command id, and worker crashes followed by a restart.
 * Checked by model/check.sh (spin -a; pan) for:
 *   - no GPU over capacity by the ledger, nor in reality (asserts CAP)
 *   - no inference role resumed while actor optimizer/grads are resident (H4)
 *   - exports never freed before every reader acknowledged load_weights (H8)
 *   - CUDA graphs restored only over the published version (H9, H10)
 *   - no deadlock (every process ends in a valid end state)
 * The C++ transition ids (T1..T16, orchestrator/handoff/transition.cc) and
 * ordering rule ids (H1..H14, ordering_rules.cc) appear as comments on the
 * statements that implement them; model_correspondence_test checks that each
 * id of the C++ tables is here. Abstractions: one tag byte each (the actor's
 * optimizer+grads+activations are one tag, TR, of 2 bytes); a stage is one
 * command; after a restart the interrupted command is re-sent (C++ re-runs
 * the whole transition, whose earlier stages are then no-ops).
 */

#define ACTOR   0
#define ROLLOUT 1
#define TEACHER 2

/* tags (bit masks) */
#define W  1   /* weights */
#define KV 2   /* kv_cache */
#define G  4   /* cuda_graph */
#define P  8   /* params */
#define TR 16  /* grads + optimizer + activations (2 bytes) */
#define X  32  /* ipc_exports */

#define CAP 4
#define CYCLES 1
#define MAXCRASH 1
#define RETRIES 2
#define MAXLOSS 2

mtype = { PAUSE, RELEASE, RESUME, PUBLISH, LOAD, CONT };

chan cmd[3] = [2] of { mtype, byte, byte };  /* kind, tags, command id */
chan ack = [4] of { byte, byte, byte };      /* worker, command id, tags held */

byte held[3];      /* what each worker really holds */
byte led[3];       /* the daemon's ledger: what the acks said */
bool dead[3];
byte crashes;
byte losses;       /* messages lost so far (bounded) */
bool lostcmd, acklost;
byte published;    /* version the actor exported */
byte loaded;       /* version the reader (rollout) acknowledged loading */
byte version;
bool done;

#define BYTES(t) (((t) & W) + (((t) & KV) >> 1) + (((t) & G) >> 2) + (((t) & P) >> 3) + (((t) & TR) >> 3) + (((t) & X) >> 5))
#define TOTAL (BYTES(held[0]) + BYTES(held[1]) + BYTES(held[2]))
#define LEDGER (BYTES(led[0]) + BYTES(led[1]) + BYTES(led[2]))

proctype Worker(byte me) {
  mtype k; byte t, id, last = 0;
end:
  do
  :: cmd[me]?k,t,id ->
     atomic {
       if
       :: dead[me] -> goto next   /* the crashed process's connection is gone */
       :: else -> skip
       fi;
       if
       :: id != last ->
          last = id;
          if
          :: k == RELEASE ->
             if
             :: (t & X) -> assert(loaded == published)      /* H8 */
             :: else -> skip
             fi;
             held[me] = held[me] & (63 - t)
          :: k == RESUME ->
             if
             :: me != ACTOR -> assert((held[ACTOR] & TR) == 0)  /* H4 H11 */
             :: else -> assert((held[ROLLOUT] | held[TEACHER]) == 0)  /* H3 */
             fi;
             if
             :: (t & G) && me == ROLLOUT -> assert(loaded == published)  /* H9 H10 */
             :: else -> skip
             fi;
             held[me] = held[me] | t;
             assert(TOTAL <= CAP)
          :: k == PUBLISH -> held[me] = held[me] | X; published = version  /* H6 */
          :: k == LOAD -> assert(published == version); loaded = published  /* H7 */
          :: else -> skip  /* PAUSE, CONT: H1 H2 H12 H13 H14 */
          fi
       :: else -> skip  /* a repeated id: a no-op that answers again */
       fi;
       if
       :: nfull(ack) -> ack!me,id,held[me]
       :: nfull(ack) -> ack!me,id,held[me]; if :: nfull(ack) -> ack!me,id,held[me] :: full(ack) -> skip fi  /* duplicate */
       :: losses < MAXLOSS -> losses++; acklost = true  /* the ack is lost */
       :: full(ack) -> acklost = true                   /* no room: dropped */
       fi;
next:  skip
     }
  :: crashes < MAXCRASH && !done ->
     atomic { held[me] = 0; last = 0; dead[me] = true; crashes++ }
  od
}

/* Restart worker `r` (T11) and give back what it held (T12, T13). */
byte restore, rk, rt, rid, aw, aid, ah;
bool got;
inline restart(r, releasing) {
  atomic {
    restore = led[r] & (63 - releasing) & (63 - X);
    led[r] = 0;                                  /* T9: Forget */
    held[r] = 0;                                 /* the old process is gone */
    do :: cmd[r]?_,_,_ :: empty(cmd[r]) -> break od;
    dead[r] = false;
    if :: r == ROLLOUT -> loaded = 0 :: else -> skip fi;
    if :: r == ACTOR -> published = 0 :: else -> skip fi  /* its exports are gone: publish again */
  }
  /* T12: it said hello; resume what it held (without graphs), reload, then graphs */
  rk = RESUME; rt = restore & (63 - G); send_wait(r);
  if
  :: r == ROLLOUT && (restore & W) && published > 0 -> rk = LOAD; rt = 0; send_wait(r)
  :: else -> skip
  fi;
  rk = RESUME; rt = restore & G; send_wait(r)    /* T13: recovery done */
}

/* Send one recovery command and wait for its ack, retrying a lost one. */
inline send_wait(r) {
  if
  :: rk == RESUME && rt == (rt & led[r]) -> skip   /* nothing to bring back */
  :: else ->
     assert(rk != RESUME || LEDGER + BYTES(rt & (63 - led[r])) <= CAP);   /* T15 never needed */
     id++; rid = id; got = false;
     do
     :: got -> break
     :: !got ->
        if
        :: nfull(cmd[r]) -> cmd[r]!rk,rt,rid
        :: losses < MAXLOSS -> losses++; lostcmd = true
        fi;
        do
        :: ack?aw,aid,ah ->
           if
           :: aw == r && aid == rid -> led[r] = ah; got = true; break
           :: else -> skip   /* T7 */
           fi
        :: empty(ack) && (lostcmd || acklost) -> lostcmd = false; acklost = false; break   /* timeout: re-send the same id */
        od
     od
  fi
}

byte id, tries, j;
/* Run one stage command (T1/T5): skip it when the ledger says it would
   change nothing, else send it and wait for its ack (T4), tolerating lost
   messages (retry, same id), duplicates and late acks (T7), timeouts (T8)
   and deaths (T9) of any worker, which restart the worker (T11). */
inline exec(w, k, t) {
  if
  :: (k == RELEASE && (led[w] & t) == 0) || (k == RESUME && (led[w] & t) == t) -> skip  /* T2: nothing to do */
  :: else ->
     assert(k != RESUME || LEDGER + BYTES(t & (63 - led[w])) <= CAP);   /* the ledger check; T15 */
     id++; tries = 0; got = false;
     do
     :: got -> break
     :: !got && tries < RETRIES ->
        if
        :: nfull(cmd[w]) -> cmd[w]!k,t,id
        :: losses < MAXLOSS -> losses++; lostcmd = true   /* the command is lost */
        fi;
        do
        :: ack?aw,aid,ah ->
           if
           :: aw == w && aid == id -> led[w] = ah; got = true; break   /* T4 T5 */
           :: else -> skip   /* T7: duplicate or late */
           fi
        :: empty(ack) && (lostcmd || acklost) -> lostcmd = false; acklost = false; tries++; break  /* timed out: retry */
        :: dead[0] || dead[1] || dead[2] -> break
        od;
        j = 0;
        do
        :: j < 3 && dead[j] ->            /* T9: a worker died */
           if :: j == w && k == RELEASE -> restart(j, t) :: else -> restart(j, 0) fi;  /* T11 */
           tries = 0; id++; j++
        :: j < 3 && !dead[j] -> j++
        :: j >= 3 -> break
        od
     :: !got && tries >= RETRIES ->       /* T8: timeout: restart it (T10 with on_fault=fail ends here) */
        if :: k == RELEASE -> restart(w, t) :: else -> restart(w, 0) fi;
        tries = 0; id++
     od
  fi
}

proctype Daemon() {
  byte cycle = 0;
  do
  :: cycle < CYCLES ->
     /* ROLLOUT (T1) */
     exec(ACTOR, RELEASE, P);            /* H2 H4: actor memory goes first */
     exec(TEACHER, RELEASE, W);          /* H5 */
     exec(ROLLOUT, RESUME, W | KV);      /* H4 H5 */
     exec(ROLLOUT, RESUME, G);           /* H9 H10 H11 */
     exec(ROLLOUT, CONT, 0);             /* H13 T6 */
     /* TEACHER(0) */
     exec(ROLLOUT, PAUSE, 0);            /* H1 */
     exec(ROLLOUT, RELEASE, W | KV | G); /* H5 */
     exec(TEACHER, RESUME, W);
     exec(TEACHER, CONT, 0);
     /* TRAIN */
     exec(TEACHER, PAUSE, 0);
     exec(TEACHER, RELEASE, W);          /* H3 */
     exec(ROLLOUT, RELEASE, W | KV | G); /* H3 */
     exec(ACTOR, RESUME, P | TR);        /* H3 */
     exec(ACTOR, CONT, 0);               /* H12 */
     /* SYNC(v) */
     exec(ACTOR, PAUSE, 0);              /* H2 */
     exec(ACTOR, RELEASE, TR);           /* H4 */
     version++;
     exec(ACTOR, PUBLISH, 0);            /* H6 */
     exec(ROLLOUT, RESUME, W);           /* H4 H7 */
     exec(ROLLOUT, LOAD, 0);             /* H6 H7 */
     exec(ACTOR, RELEASE, X);            /* H8 H14 */
     cycle++
  :: cycle >= CYCLES -> break
  od;
  done = true;
  /* T3 T16: later requests and events are refused or ignored (not modelled further) */
end_daemon: skip
}

init {
  /* T14: every worker said hello before the first phase request */
  atomic {
    run Worker(ACTOR);
    run Worker(ROLLOUT);
    run Worker(TEACHER);
    run Daemon()
  }
}
