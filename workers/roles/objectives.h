// The actor's objectives (issue #18 item 1; docs/mopd.md "Objectives and
// routes"): what each step's prompts are drawn from, and which teachers
// score them. Torch-free.
//
// `--objectives` is a JSON object, one key per objective ([a-z0-9_-]+):
//
//   {"add": {"kind": "distill", "teacher": "teacher_add",
//            "dataset": "synthetic-arith", "dataset_options": {"ops": ["+"]},
//            "weight": 1},
//    "mul": {"kind": "distill", "teacher": "teacher_mul",
//            "dataset": "synthetic-arith", "dataset_options": {"ops": ["*"]},
//            "route": {"mul": 0.7, "add": 0.3}},
//    "task": {"kind": "rl", "dataset": "gsm8k", "weight": 0.5}}
//
// Keys of an objective:
//   kind               "rl" (task reward only) or "distill" (a teacher)
//   teacher            distill: the teacher's role in the job (its handoff
//                      phase is teacher:<role>); refused on an rl objective
//   teacher_port_file  where that role's replica 0 writes its port
//                      (default "<teacher>.port", relative to the run dir)
//   dataset            a data set name (default "synthetic-arith")
//   dataset_options    its options (an object; default its defaults)
//   eval_options       its held-out set's options (default: as --eval-options)
//   weight             its share of each step's prompts, a number > 0 (default 1)
//   route              the route of its prompts: {objective: weight >= 0},
//                      default {<itself>: 1}; weights are not renormalised
//
// A prompt's route gives each teacher the summed weights of the distill
// objectives on it that name that teacher; rl objectives on a route add no
// teacher. Every error names its path ("--objectives.mul.route.sub: no such
// objective").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::roles {

struct Objective {
  std::string name;
  bool distill = false;
  std::string teacher;                  // distill: the teacher role
  std::string teacher_port_file;        // distill: "<teacher>.port" unless given
  std::string dataset = "synthetic-arith";
  nlohmann::json dataset_options;       // null: the data set's defaults
  nlohmann::json eval_options;          // null: the actor's --eval-options rule
  double weight = 1;
  std::map<std::string, double> route;  // objective -> weight
};

struct Objectives {
  std::vector<Objective> list;             // by name
  std::vector<std::string> teachers;       // the distinct teacher roles, by name
  std::vector<std::string> port_files;     // per teacher
  std::vector<std::vector<float>> routes;  // per objective: its prompts' weight per teacher
  bool any_teacher() const { return !teachers.empty(); }
};

// `spec` checked as above; `where` prefixes errors ("--objectives").
StatusOr<Objectives> ParseObjectives(const nlohmann::json& spec, const std::string& where);

// One rl objective over the actor's --dataset: what a run without
// --objectives trains on.
Objectives SingleObjective(const std::string& dataset, const nlohmann::json& dataset_options,
                           const nlohmann::json& eval_options);

// `prompts` split over the objectives by weight, largest remainders first
// (ties to the earlier objective); sums to `prompts`.
std::vector<int64_t> SplitPrompts(const Objectives& objectives, int64_t prompts);

}  // namespace tandem::roles
