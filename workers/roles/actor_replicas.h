// The actor's data-parallel replicas (docs/rl.md "Data parallel"; issue
// #16 item 4). An actor role with `replicas: N` runs N processes
// (TANDEM_RANK, TANDEM_WORLD_SIZE). Rank 0 is the controller
// (actor_role.h): the only one that samples prompts, asks the rollouts,
// scores, evaluates, publishes weights and writes checkpoints, metrics and
// --out. Every rank holds the same model and trains its share of each
// step's groups; the trainer sums the gradients (train/grpo_trainer.h "Data
// parallel"), so the replicas stay identical.
//
// Rendezvous: rank 0 serves the group's store on its first leased port
// (the role needs `"ports": 1`) and writes that port to --dp-port-file
// (port_file.h; in the run dir); the other ranks read it (waiting past an
// earlier job's file) and join at --dp-host. CPU: gloo; CUDA: NCCL.
//
// Rank 0's messages to the others (collective::Group::Broadcast,
// MessagePack), in this order:
//   start {checkpoint}   the checkpoint rank 0 resumed from ("" none): a
//                        replica restores the same one, or fails naming both;
//   step {step, progress, shares, check}  after phase TRAIN, shares[r]
//                        the trajectories rank r trains on (DealGroups),
//                        then every rank runs the trainer's step and, with
//                        check (a checkpoint's step, the last), compares
//                        the parameters: replicas that diverged fail;
//   end                  the run is over: the replicas exit 0;
//   abort {error}        rank 0 failed outside a step: they exit 1 naming it.
// A replica waits for the next message up to ReplicaWait(options) (rank 0
// may spend several phases and an eval between two steps); rank 0 dying is
// seen at once (its store closes). Any failure ends the replica with an
// error: one replica's death fails the others' step (a collective), and
// each process follows the job's on_fault.
//
// The replicas join tandemd as workers of the actor role (the handoff
// pauses, releases and resumes them like rank 0; publish_weights is acked
// without a source: rank 0's segment is the one the rollouts load).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/control/control_messages.h"
#include "workers/roles/actor_options.h"
#include "workers/collective/group.h"
#include "workers/train/grpo_trainer.h"

namespace tandem::roles {

struct ReplicaMessage {
  enum class Kind { kStart, kStep, kEnd, kAbort };
  Kind kind = Kind::kEnd;
  std::string checkpoint;  // kStart
  int64_t step = 0;        // kStep
  double progress = 0;     // kStep: the schedule's position, [0, 1]
  bool check = false;      // kStep: after it, every rank compares the parameters and gathers a sharded
                           // optimizer state for the checkpoint (GrpoTrainer::CheckReplicasAgree)
  std::vector<std::vector<train::Trajectory>> shares;  // kStep: one per rank
  std::string error;       // kAbort
};

std::string EncodeReplicaMessage(const ReplicaMessage& m);
// InvalidArgument naming what is malformed (a step's shares must be
// world_size many).
StatusOr<ReplicaMessage> DecodeReplicaMessage(const std::string& bytes, int world_size);

// Deals whole groups (trajectories sharing `group`, contiguous) to `ranks`
// shares, balancing their tokens (prompt + response; the largest group
// first, to the least loaded rank); each share keeps the groups' order.
std::vector<std::vector<train::Trajectory>> DealGroups(const std::vector<train::Trajectory>& trajectories, int ranks);

// How long a replica waits for rank 0's next message.
std::chrono::milliseconds ReplicaWait(const ActorOptions& o);

// Joins the actor's group as `hello`'s rank of its world size (1: a local
// group, no networking).
StatusOr<std::unique_ptr<collective::Group>> JoinActorReplicas(const ActorOptions& o,
                                                                      const control::Hello& hello);

}  // namespace tandem::roles
