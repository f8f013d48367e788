// The handoff log for people (`tandem events JOB|RUN_DIR --handoff`,
// docs/cli.md): one line per handoff.jsonl line (one command and tag):
// time, phase, step/stage, role/rank, command, tag, bytes (human units),
// duration, outcome, message. Phase transitions are separated by a header
// line naming the group, the phase and its span.
#pragma once

#include <string>

#include "orchestrator/report/run_logs.h"

namespace tandem::report {

// One command line, e.g.
// "12:00:01.500  1 release_inference  rollout/0  release   kv_cache    30 B  500 ms  ok"
std::string HandoffLineText(const HandoffLine& l);

// Every line, with a header per phase transition ("== group actor: TRAIN
// 12:00:01.000 .. 12:00:03.000 (2.00 s, 9 commands)").
std::string HandoffLogText(const RunLogs& logs);

}  // namespace tandem::report
