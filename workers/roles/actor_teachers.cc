// The actor's teachers (actor_teachers.h).
#include "workers/roles/actor_teachers.h"

#include <chrono>

#include "workers/roles/actor_rollouts.h"
#include "workers/roles/teacher_client.h"

namespace tandem::roles {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StatusOr<std::vector<RolloutEndpoint>> WaitForTeachers(const ActorOptions& o, const Objectives& objectives,
                                                       const std::string& job) {
  std::vector<RolloutEndpoint> out;
  for (size_t k = 0; k < objectives.teachers.size(); ++k) {
    TANDEM_ASSIGN_OR_RETURN(const int port,
                            WaitForPortFile(o, objectives.port_files[k], job, "teacher " + objectives.teachers[k]));
    out.push_back({o.rollout_host, port});
  }
  return out;
}

StatusOr<std::vector<TeacherTurn>> ScoreWithTeachers(const ActorOptions& o, const std::string& job,
                                                     const Objectives& objectives,
                                                     std::vector<RolloutEndpoint>& teachers,
                                                     const std::function<Status(const std::string&)>& phase,
                                                     const TeacherScoring& scoring,
                                                     std::vector<train::Trajectory>& trajectories) {
  std::vector<TeacherTurn> turns;
  for (size_t k = 0; k < objectives.teachers.size(); ++k) {
    const std::string& name = objectives.teachers[k];
    std::vector<size_t> routed;
    ScoreCall call;
    call.temperature = scoring.temperature;
    call.top_k = scoring.top_k;
    for (size_t i = 0; i < trajectories.size(); ++i) {
      train::Trajectory& t = trajectories[i];
      t.teacher_logprobs.resize(objectives.teachers.size());
      if (scoring.top_k > 0) {
        t.teacher_top_ids.resize(objectives.teachers.size());
        t.teacher_top_logprobs.resize(objectives.teachers.size());
      }
      if (t.route.size() != objectives.teachers.size() || !(t.route[k] > 0)) continue;
      std::vector<int32_t> s = t.prompt;
      s.insert(s.end(), t.response.begin(), t.response.end());
      call.sequences.push_back(std::move(s));
      call.score_from.push_back(static_cast<int32_t>(t.prompt.size()));
      routed.push_back(i);
    }
    if (routed.empty()) continue;
    const Clock::time_point t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(phase("teacher:" + name), "teacher " + name);
    std::vector<TeacherScore> scored;
    TANDEM_RETURN_IF_ERROR(AskAgainWhileDown(o, job, objectives.port_files[k], &teachers[k], "teacher " + name,
                                             [&]() -> Status {
                                               TANDEM_ASSIGN_OR_RETURN(scored,
                                                                       Score(teachers[k], call, Millis(o.request_timeout_s)));
                                               return Status::Ok();
                                             }));
    for (size_t r = 0; r < routed.size(); ++r) {
      train::Trajectory& t = trajectories[routed[r]];
      t.teacher_logprobs[k] = std::move(scored[r].logprobs);
      if (scoring.top_k == 0) continue;
      t.teacher_top_ids[k] = std::move(scored[r].top_ids);
      t.teacher_top_logprobs[k] = std::move(scored[r].top_logprobs);
    }
    turns.push_back({name, std::chrono::duration<double>(Clock::now() - t0).count()});
  }
  return turns;
}

}  // namespace tandem::roles
