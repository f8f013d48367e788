// Control protocol messages, version 1 (schemas/control.schema.json;
// docs/control-protocol.md).
//
// Plain structs for what a worker says and hears, and their JSON encodings.
// Parsing never throws: a bad line becomes a Status whose message names what
// was wrong, and the client answers it with an `error` line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::control {

inline constexpr int kProtocolVersion = 1;
// Longest line either side accepts, newline included.
inline constexpr size_t kDefaultMaxLineBytes = 1 << 20;

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
};
nlohmann::json ToJson(const Residency& r);

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
  // "Authentication"); sent when not empty, required over TCP.
  std::string token;
};
nlohmann::json ToJson(const Hello& h, const Residency& r);
// Fills job/task/role/rank/world size/devices/token from TANDEM_* variables and
// CUDA_VISIBLE_DEVICES (devices are then 0..n-1, the worker's own namespace).
Hello HelloFromEnvironment();

// A command from the daemon: `type`, `id`, and the whole line for fields
// specific to the command. Accessors validate their field.
struct Command {
  std::string type;
  int64_t id = -1;
  nlohmann::json body;

  // release/resume: the tags named (empty: all tags).
  StatusOr<std::vector<std::string>> Tags() const;
  // pause: "abort" or "finish".
  StatusOr<std::string> Mode() const;
  // publish_weights/load_weights: the version.
  StatusOr<int64_t> Version() const;
  // load_weights: the source.
  StatusOr<std::string> Source() const;
};

// Parses one line (without its newline) from the daemon. Errors are
// kInvalidArgument ("malformed: ...") with the id when one could be read.
struct ParsedLine {
  std::optional<Command> command;
  Status status;       // not ok: the line could not be used
  std::optional<int64_t> id;  // known even when status is not ok, if present
};
ParsedLine ParseDaemonLine(std::string_view line);

// Error codes of the protocol from a Status code ("invalid_argument", ...).
std::string_view ErrorCodeFor(StatusCode code);

nlohmann::json MakeAck(const Command& c, const Residency& r, int64_t duration_us,
                       const nlohmann::json& detail);
nlohmann::json MakeError(std::optional<int64_t> id, std::string_view command,
                         std::string_view code, std::string_view message,
                         const std::optional<Residency>& r);

}  // namespace tandem::control
