// One colocation group's handoff executor (docs/handoff.md;
// orchestrator/handoff/transition.h states the contract this implements).
//
// It holds the group's GroupState and feeds it every event in the order
// observed: the event is appended to the group's journal first (not waiting
// for fsync), then Apply runs, then the actions are performed:
//  - SendCommand: sent to the worker's connection with wire id
//    (epoch << 32 | command id), so ids never repeat across daemon lives; a
//    worker not connected gets it when it says hello. The same wire id is
//    re-sent once at half the timeout; at the timeout Timeout is fed.
//  - HandoffRecord / ResidencyRecord: appended to handoff.jsonl /
//    residency.jsonl; the per-GPU peak is tracked for GET /residency.
//  - PhaseReached / PhaseRefused: answer every waiter for that phase.
//  - RestartWorker / GroupFailed: handed to the Host (the service).
// Every `compact_every` journal records, once the group is settled with
// nothing outstanding and no worker down, the journal is compacted into a
// snapshot of the state (handoff/state_codec.h), so a long job's restart
// replays a bounded journal; the logs' event numbering carries on across it.
// A restarted daemon restores the snapshot and replays the journal after it
// through Apply (performing nothing) and then re-arms the timers of outstanding commands and re-issues
// RestartWorker for workers that were down: the replayed state may lag
// reality by the events not yet durable, which is safe because commands are
// idempotent per tag and every worker's hello carries its true residency.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/handoff/log_writer.h"
#include "orchestrator/handoff/transition.h"
#include "orchestrator/store/durable_log.h"

namespace tandem::daemon {

class HandoffGroup {
 public:
  struct Host {
    virtual ~Host() = default;
    // Sends one line to the worker; false when it has no open connection.
    virtual bool Send(const handoff::WorkerId& w, const nlohmann::json& line) = 0;
    virtual void RestartWorker(const handoff::WorkerId& w, const std::string& cause) = 0;
    virtual void GroupFailed(const std::string& cause) = 0;
  };
  // ok: the phase reached (its name); error: refused or failed.
  using PhaseCallback = std::function<void(StatusOr<nlohmann::json>)>;

  // Opens (creating) the journal under `journal_dir` and recovers from it
  // (snapshot, then the records after it).
  static StatusOr<std::unique_ptr<HandoffGroup>> Open(boost::asio::io_context& io, std::string name,
                                                      std::shared_ptr<const handoff::GroupConfig> config,
                                                      const std::filesystem::path& journal_dir,
                                                      const std::filesystem::path& run_dir,
                                                      handoff::LogContext log_context, uint32_t epoch, Host& host,
                                                      uint64_t compact_every);
  ~HandoffGroup();

  const std::string& name() const { return name_; }
  const handoff::GroupState& state() const { return state_; }
  bool Has(const handoff::WorkerId& w) const { return state_.workers.count(w) > 0; }
  bool Outstanding(const handoff::WorkerId& w) const;

  void Feed(const handoff::Event& e);
  // A worker said hello: feeds it, then sends its outstanding commands again.
  void OnHello(const handoff::Hello& h);
  // An ack (error empty) or error from the worker; `wire_id` as it came
  // back. Ids of another daemon life are ignored.
  // `source`: a publish_weights ack's detail.source (control::Answer), the
  // URI the readers of that version are sent to.
  void OnAnswer(const handoff::WorkerId& w, int64_t wire_id, std::map<handoff::Tag, uint64_t> resident,
                std::vector<handoff::DeviceMemory> devices, const std::optional<std::string>& error,
                const std::string& source = "");
  // Runs (or joins) a transition. While the group is settled but some worker
  // has not said hello yet (the job is starting, or a worker is restarting),
  // the request waits for them up to the group's timeout.
  void RequestPhase(const handoff::Phase& p, PhaseCallback done);

  // GET /v1/jobs/{id}/residency, one group.
  nlohmann::json ResidencyJson() const;
  // After the job ended: the journal is no longer needed.
  void RemoveJournal();

  static double Now();

 private:
  HandoffGroup(boost::asio::io_context& io, std::string name, uint32_t epoch, Host& host);
  void Perform(std::vector<handoff::Action>& actions);
  void Send(const handoff::SendCommand& c, bool retry);
  void ArmTimer(uint64_t command_id, double timeout_s);
  void Answer(const handoff::Phase& p, const StatusOr<nlohmann::json>& result);
  void DropAnswered();  // forgets sent commands the engine no longer has outstanding
  void TrackPeaks();
  void MaybeCompact();
  Status Restore(const nlohmann::json& snapshot);
  bool AllSaidHello() const;
  std::string MissingHello() const;
  int64_t WireId(uint64_t command_id) const { return (static_cast<int64_t>(epoch_) << 32) | static_cast<int64_t>(command_id); }

  boost::asio::io_context& io_;
  std::string name_;
  uint32_t epoch_;
  Host& host_;
  handoff::GroupState state_;
  std::unique_ptr<store::DurableLog> journal_;
  std::filesystem::path journal_dir_;
  std::filesystem::path run_dir_;  // the job's run dir: durable weights under weights/
  std::unique_ptr<handoff::LogWriter> logs_;
  std::map<uint64_t, handoff::SendCommand> sent_;  // outstanding commands by engine id, as sent
  uint64_t events_ = 0;  // events journaled so far (replayed + fed): the logs' "event" numbers
  uint64_t compact_every_ = 0;
  std::map<uint64_t, std::unique_ptr<boost::asio::steady_timer>> timers_;
  std::vector<std::pair<handoff::Phase, PhaseCallback>> waiters_;
  std::vector<std::pair<handoff::Phase, PhaseCallback>> held_;  // requests waiting for hellos
  std::unique_ptr<boost::asio::steady_timer> hold_timer_;
  std::map<int, std::pair<uint64_t, double>> peak_;  // gpu -> (bytes, when)
  std::map<int64_t, std::string> published_;  // version -> the publisher's source (the newest few)
};

// Where weights come from: publish_weights names `durable`, the copy the
// actor keeps at <run_dir>/weights/v<N> (file:); load_weights names the
// source the publisher's ack gave for that version (shm:/..., ipc:...),
// else ipc:v<N>, or that durable copy for a reader restored by recovery (the
// exports may be freed by then; docs/handoff.md "Restarted readers").
struct WeightSources {
  std::filesystem::path run_dir;  // "": no durable copies (ipc: only)
  bool recovering = false;        // the group is bringing restarted workers back
  const std::map<int64_t, std::string>* published = nullptr;  // version -> the publisher's source
};
// The wire form of one command (schemas/control.schema.json).
nlohmann::json CommandLine(const handoff::SendCommand& c, int64_t wire_id, const WeightSources& sources);

}  // namespace tandem::daemon
