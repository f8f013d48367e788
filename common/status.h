// Errors as values, each frame adding where it passed (as NCCL does).
//
// A Status is ok or carries a code and a message. Each frame that passes an
// error up may add where it passed (`WithContext`), so a failure reads as a
// trail: "submit job demo: place role actor: needs 8 devices, job has 4".
// Inside the daemon nothing throws across module boundaries; code that calls
// a throwing library catches at its edge and returns a Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tandem {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad input from a user: spec, request, flag
  kNotFound,           // a job, task, file or process that does not exist
  kAlreadyExists,
  kFailedPrecondition, // valid request, wrong state (cancel a finished job)
  kResourceExhausted,  // no port, no GPU memory, queue full
  kUnavailable,        // a peer (worker, Redis, slurmctld) did not answer
  kDeadlineExceeded,
  kPermissionDenied,   // missing or wrong token
  kDataLoss,           // corrupt journal record, torn write
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends "context: " to the message; a no-op on ok.
  Status WithContext(std::string_view context) const;
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
// A Status from errno, e.g. ErrnoStatus("open /x/y") -> "open /x/y: No such file or directory".
Status ErrnoStatus(std::string_view what, int err);
Status ErrnoStatus(std::string_view what);  // uses the current errno

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }
  StatusOr(T value) : v_(std::move(value)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace tandem

#define TANDEM_CONCAT_INNER_(a, b) a##b
#define TANDEM_CONCAT_(a, b) TANDEM_CONCAT_INNER_(a, b)

// Returns the error of `expr` (a Status), prefixed with `context` when given.
#define TANDEM_RETURN_IF_ERROR(expr, ...)                                    \
  do {                                                                       \
    ::tandem::Status _tandem_st = (expr);                                    \
    if (!_tandem_st.ok()) return _tandem_st.WithContext(std::string(__VA_ARGS__)); \
  } while (0)

// Declares `lhs` from a StatusOr expression, or returns its error.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr, ...) \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_CONCAT_(_tandem_so_, __LINE__), lhs, expr, __VA_ARGS__)
#define TANDEM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ...)                   \
  auto tmp = (expr);                                                         \
  if (!tmp.ok()) return tmp.status().WithContext(std::string(__VA_ARGS__));  \
  lhs = std::move(tmp).value()
