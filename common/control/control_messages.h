// Control protocol messages, version 1 (schemas/control.schema.json;
// docs/control-protocol.md): plain structs for
// every line either side sends, their JSON encodings, and their decoders. The
// one codec of the protocol: tandemd (orchestrator/daemon/handoff_service.cc)
// and the workers (workers/runtime/control_client.cc) both use it.
//
// Decoding never throws: every field is type-checked (a field that is present
// must have its schema type; unknown fields are ignored), and a bad line
// becomes kInvalidArgument whose message names the field, e.g.
// "hello.rank: expected an integer". Lines come through ParseLine
// (control_codec.h), which bounds their length and nesting.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/control/control_codec.h"
#include "common/status.h"

namespace tandem::control {

// Where to connect: TANDEM_CONTROL = "unix:/path/to.sock" or "tcp:HOST:PORT".
struct Endpoint {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp
  uint16_t port = 0; // kTcp
  std::string ToString() const;
};
StatusOr<Endpoint> ParseEndpoint(std::string_view text);

// The device's memory as the worker reads it; `source` says how
// ("cuda": cuMemGetInfo, "pool": the pools' own accounting, "rss").
struct DeviceMemory {
  int index = 0;
  uint64_t used = 0;
  uint64_t total = 0;
  std::string source = "pool";
};

// Sent with every ack and error: bytes resident per tag, and the device.
struct Residency {
  std::map<std::string, uint64_t> tags;
  DeviceMemory device;
  bool has_device = true;  // decoded: whether the line carried "device"
};
nlohmann::json ToJson(const Residency& r);
// `where` names the field in errors ("hello.residency").
StatusOr<Residency> DecodeResidency(const nlohmann::json& j, const std::string& where);

struct TagInfo {
  std::string name;
  uint64_t bytes = 0;
  bool backup = false;
};

// The worker's first line.
struct Hello {
  std::string job_id, task_id;
  std::string role;
  int rank = 0;
  int world_size = 1;
  std::vector<int> devices;
  std::vector<std::string> capabilities;  // empty: every command with a handler
  std::vector<TagInfo> tags;
  // The launch's control token (TANDEM_CONTROL_TOKEN; docs/control-protocol.md
  // "Authentication"); sent when not empty, required by the daemon.
  std::string token;
  // Decoded only (the encoder takes the residency and its own pid):
  int pid = 0;
  std::optional<Residency> residency;
};
nlohmann::json ToJson(const Hello& h, const Residency& r);
// A hello line's body (its type already "hello", its protocol not checked
// here). Required: role (string) and rank (integer >= 0).
StatusOr<Hello> DecodeHello(const nlohmann::json& body);
// Fills job/task/role/rank/world size/devices/token from TANDEM_* variables and
// CUDA_VISIBLE_DEVICES (devices are then 0..n-1, the worker's own namespace).
Hello HelloFromEnvironment();

// Worker -> daemon: the answer to a command (type "ack" or "error").
struct Answer {
  bool error = false;
  std::optional<int64_t> id;
  std::string command;            // "" when absent
  std::string code, message;      // errors
  std::optional<Residency> residency;
  // An ack's detail.source: the URI a publish_weights made its version
  // available under, which the daemon sends the readers' load_weights to
  // (docs/control-protocol.md). "" when absent. A scheme of weight_source's
  // (shm:, ipc:, file:, nccl:), at most kMaxSourceBytes, no control bytes.
  std::string source;
};
inline constexpr size_t kMaxSourceBytes = 4096;
StatusOr<Answer> DecodeAnswer(const ParsedObject& line);

// Worker -> daemon: request_phase.
struct PhaseRequest {
  int64_t id = 0;
  std::string phase;
  std::optional<int64_t> version;
};
StatusOr<PhaseRequest> DecodePhaseRequest(const ParsedObject& line);

// Worker -> daemon: metrics (values: an object, logged as it came).
struct Metrics {
  nlohmann::json values = nlohmann::json::object();
  std::optional<int64_t> step;
};
StatusOr<Metrics> DecodeMetrics(const ParsedObject& line);

// A command from the daemon: `type`, `id`, and the whole line for fields
// specific to the command. Accessors validate their field.
struct Command {
  std::string type;
  int64_t id = -1;
  nlohmann::json body;

  // release/resume: the tags named (empty: all tags).
  StatusOr<std::vector<std::string>> Tags() const;
  // pause: "abort", "retract" or "in_place" (SGLang's pause modes).
  StatusOr<std::string> Mode() const;
  // publish_weights/load_weights: the version.
  StatusOr<int64_t> Version() const;
  // load_weights: the source.
  StatusOr<std::string> Source() const;
  // error: its code and message ("" when absent or not strings).
  std::string StringField(const char* name) const;
};

// Parses one line (without its newline) from the daemon. Errors are
// kInvalidArgument ("malformed: ...") with the id when one could be read.
struct ParsedLine {
  std::optional<Command> command;
  Status status;       // not ok: the line could not be used
  std::optional<int64_t> id;  // known even when status is not ok, if present
};
ParsedLine ParseDaemonLine(std::string_view line);

nlohmann::json MakeAck(const Command& c, const Residency& r, int64_t duration_us,
                       const nlohmann::json& detail);
nlohmann::json MakeError(std::optional<int64_t> id, std::string_view command,
                         std::string_view code, std::string_view message,
                         const std::optional<Residency>& r);
// Daemon -> worker: the phase a request_phase asked for was reached.
nlohmann::json MakePhaseDone(int64_t id, std::string_view phase, int64_t duration_us);

}  // namespace tandem::control
