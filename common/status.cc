// Status helpers; see status.h.
#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace tandem {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status Status::WithContext(std::string_view context) const {
  if (ok() || context.empty()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status ErrnoStatus(std::string_view what, int err) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case ENOENT: case ESRCH: code = StatusCode::kNotFound; break;
    case EEXIST: code = StatusCode::kAlreadyExists; break;
    case EACCES: case EPERM: code = StatusCode::kPermissionDenied; break;
    case EINVAL: code = StatusCode::kInvalidArgument; break;
    case EADDRINUSE: case ENOSPC: case EMFILE: case ENFILE: case EAGAIN: case ENOMEM:
      code = StatusCode::kResourceExhausted; break;
    case ETIMEDOUT: code = StatusCode::kDeadlineExceeded; break;
    case ECONNREFUSED: case ECONNRESET: case EPIPE: code = StatusCode::kUnavailable; break;
    default: break;
  }
  return Status(code, std::string(what) + ": " + std::strerror(err));
}

Status ErrnoStatus(std::string_view what) { return ErrnoStatus(what, errno); }

}  // namespace tandem
