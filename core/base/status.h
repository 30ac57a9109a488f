// Errors as values. A caller tells failures apart by code (abseil's
// vocabulary) and reads where it happened from the context: which rank, which
// peer, which step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/base/check.h"

namespace engram {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong; fix the input
  kFailedPrecondition,  // the system is not in a state where this can work
  kResourceExhausted,   // out of memory, tmpfs, fds
  kUnavailable,         // a peer is dead, unreachable or timed out
  kPermissionDenied,    // credentials, tokens, driver NOT_PERMITTED
  kNotFound,
  kAlreadyExists,       // e.g. a stale shm segment from a crashed run
  kDeadlineExceeded,
  kInternal,            // a broken invariant of ours
};

const char* error_code_name(ErrorCode code);

// Where an error happened. -1 means "not applicable".
struct ErrorContext {
  int rank = -1;
  int peer = -1;
  std::string step;  // "export", "send", "import", "map", "access", ...
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message, ErrorContext context = {})
      : code_(code), message_(std::move(message)), context_(std::move(context)) {
    ENGRAM_CHECK_MSG(code_ != ErrorCode::kOk, "an error Status needs an error code; use Status::ok() for success");
  }
  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const ErrorContext& context() const { return context_; }

  // Adds context that is not already set (inner context wins: it is closer to
  // the failure). Success carries no context: it stays ok, unchanged.
  Status with_context(int rank, int peer, std::string_view step) &&;
  Status with_rank(int rank) &&;

  // "unavailable: rank 3, peer 5, step import: <message>"
  std::string to_string() const;

  void ignore() const {}

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  ErrorContext context_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {ErrorCode::kFailedPrecondition, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status permission_denied(std::string m) { return {ErrorCode::kPermissionDenied, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// Aborts with "Result::value() on an error: <status>"; out of line so value()
// stays a load and a branch.
[[noreturn]] void result_value_on_error(const Status& status);

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    ENGRAM_CHECK_MSG(!status_.is_ok(), "a Result built from a Status must carry an error");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // The error; on an ok Result this aborts (it has no error to give).
  Status take_status() && {
    ENGRAM_CHECK_MSG(!is_ok(), "take_status() on a Result that holds a value");
    return std::move(status_);
  }

  // On an error these abort, naming the error (never undefined behaviour).
  T& value() & { check_value(); return *value_; }
  const T& value() const& { check_value(); return *value_; }
  T&& value() && { check_value(); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check_value() const {
    if (__builtin_expect(!value_.has_value(), 0)) result_value_on_error(status_);
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace engram

// Early return on error. Usage: ENGRAM_RETURN_IF_ERROR(do_thing());
#define ENGRAM_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::engram::Status engram_status_ = (expr);        \
    if (!engram_status_.is_ok()) return engram_status_; \
  } while (0)

#define ENGRAM_CONCAT_INNER(a, b) a##b
#define ENGRAM_CONCAT(a, b) ENGRAM_CONCAT_INNER(a, b)
// ENGRAM_ASSIGN_OR_RETURN(auto x, make_x());
#define ENGRAM_ASSIGN_OR_RETURN(lhs, expr) \
  ENGRAM_ASSIGN_OR_RETURN_IMPL(ENGRAM_CONCAT(engram_result_, __LINE__), lhs, expr)
#define ENGRAM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return std::move(tmp).take_status(); \
  lhs = std::move(tmp).value()
