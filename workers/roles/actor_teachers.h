// The actor's teachers (MOPD; issue #18 item 2; docs/mopd.md "Teacher
// phases"): after ROLLOUT, each teacher on some trajectory's route scores
// the student's tokens in its own TEACHER phase (and, with the distill
// loss's top-k term, returns its top-k tokens at each position).
//
// ScoreWithTeachers, for each teacher of the objectives in their order
// that some trajectory is routed to (route weight > 0): asks tandemd for
// the phase "teacher:<role>" (the handoff makes that teacher, and only it,
// resident), then POSTs those trajectories (prompt + response, scored from
// the response's first token) to its /score and keeps the log-probs in
// Trajectory::teacher_logprobs[k]. The next phase is asked only after every
// answer is in: a teacher is released only once the actor holds what it
// needs. A teacher that is down or coming back (Unavailable: a restarted
// task) is asked again at the port its file names by then, until
// --phase-timeout; other errors end the step.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/roles/actor_options.h"
#include "workers/roles/objectives.h"
#include "workers/roles/rollout_client.h"
#include "workers/train/grpo_trainer.h"

namespace tandem::roles {

// Waits up to --phase-timeout for every teacher's port file.
StatusOr<std::vector<RolloutEndpoint>> WaitForTeachers(const ActorOptions& o, const Objectives& objectives,
                                                       const std::string& job);

struct TeacherTurn {
  std::string teacher;
  double seconds = 0;  // the phase and the scoring
};

struct TeacherScoring {
  double temperature = 1.0;  // the trainer's
  int64_t top_k = 0;         // > 0: also each teacher's top_k tokens per position
};

// `trajectories[i].route` set (objectives.routes of its objective); fills
// teacher_logprobs (and teacher_top_*). `phase(name)` asks tandemd for a phase.
StatusOr<std::vector<TeacherTurn>> ScoreWithTeachers(const ActorOptions& o, const std::string& job,
                                                     const Objectives& objectives,
                                                     std::vector<RolloutEndpoint>& teachers,
                                                     const std::function<Status(const std::string&)>& phase,
                                                     const TeacherScoring& scoring,
                                                     std::vector<train::Trajectory>& trajectories);

}  // namespace tandem::roles
