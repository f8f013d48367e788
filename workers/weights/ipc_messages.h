// The messages of the cuda-ipc weight transport (docs/weights.md "The
// cuda-ipc transport"; issue #15 item 1) and its source URI. Torch-free and
// CUDA-free (unit-tested on CPU: tests/ipc_messages_test.cc).
//
// Source URI: "ipc:" + socket address (ipc_socket.h) + "#v" + version:
//   ipc:@tandem-<job>-<task>#v3           the publisher's abstract socket (default)
//   ipc:/run/x/ipc/actor-0.sock#v3        a socket file (IpcOptions::socket_dir)
// A reader asks the publisher listening there for exactly that version.
//
// One reader's conversation, each message one frame (ipc_socket.h) whose
// payload is a JSON object with exactly the keys shown:
//   reader -> publisher  request {"version": 3}
//   publisher -> reader  offer   {"version": 3, "sealed": true, "device_uuid": "GPU-<32 hex>",
//                                 "allocation_bytes": N, "publisher_pid": P, "manifest": {...}}
//                        with one descriptor: the version's CUDA VMM allocation
//                        (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
//                        or error   {"code": "not_found", "message": "..."}
//   reader -> publisher  ack     {"version": 3}      once its copy is synchronised
//   publisher -> reader  acked   {"version": 3, "acks": 1, "expected": 1, "freed": true}
// The manifest is weight_manifest.h's (its digest is 0: device memory is
// not hashed, see docs/weights.md for what protects a reader instead). Its
// buffers lie in the allocation at IpcBufferOffsets (each at a multiple of
// kIpcBufferAlign, in order), and the allocation holds at least their end.
//
// ParseOffer treats the payload as hostile: unknown or missing keys, wrong
// types, sealed false, a version other than the one requested (or the
// manifest's differing from the offer's), a malformed uuid, an allocation of
// 0 bytes, above 2^48, or smaller than the buffers' end are refused:
// DataLoss naming the field (a manifest that fails ParseWeightManifest's
// checks: DataLoss with its JSON path).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/weights/ipc_socket.h"
#include "workers/weights/weight_manifest.h"

namespace tandem::weights::ipc {

inline constexpr uint64_t kIpcBufferAlign = 4096;
inline constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 48;

struct IpcUri {
  SocketAddress address;
  int64_t version = 0;
};
// `text` is what follows "ipc:"; InvalidArgument naming the expected form.
StatusOr<IpcUri> ParseIpcUri(std::string_view text);
std::string FormatIpcUri(const IpcUri& uri);  // "ipc:@name#v3"

// The default address of a publisher: "@tandem-<job>-<task>" (job and task
// with any byte outside [A-Za-z0-9._] replaced by '_'), or, with `dir`,
// "<dir>/tandem-<job>-<task>.sock".
StatusOr<SocketAddress> PublisherAddress(std::string_view job, std::string_view task, std::string_view dir = "");

struct IpcOffer {
  int64_t version = 0;
  bool sealed = false;
  std::string device_uuid;  // "GPU-" + 32 lowercase hex digits
  uint64_t allocation_bytes = 0;
  int64_t publisher_pid = 0;
  WeightManifest manifest;
};
std::string EncodeOffer(const IpcOffer& offer);
StatusOr<IpcOffer> ParseOffer(std::string_view payload, int64_t requested_version);

// Where buffer b of `m` starts in the allocation; *end is where the last ends.
std::vector<uint64_t> IpcBufferOffsets(const WeightManifest& m, uint64_t* end);

// request and ack: {"version": v}.
std::string EncodeVersionMessage(int64_t version);
StatusOr<int64_t> ParseVersionMessage(std::string_view payload, std::string_view what);

struct IpcAcked {
  int64_t version = 0;
  uint32_t acks = 0;
  uint32_t expected = 0;
  bool freed = false;
};
std::string EncodeAcked(const IpcAcked& a);
StatusOr<IpcAcked> ParseAcked(std::string_view payload);

// error: the Status a publisher refuses a request with, and back.
std::string EncodeError(const Status& st);
// The refusal as a Status of its code (an unknown code is DataLoss).
Status ParseError(std::string_view payload);

}  // namespace tandem::weights::ipc
