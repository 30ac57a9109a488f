#include "core/base/status.h"

#include <cstdio>
#include <cstdlib>

namespace engram {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kFailedPrecondition: return "failed_precondition";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kAlreadyExists: return "already_exists";
    case ErrorCode::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Status Status::with_context(int rank, int peer, std::string_view step) && {
  if (is_ok()) return std::move(*this);  // most calls: wrapping a step that worked
  if (context_.rank < 0) context_.rank = rank;
  if (context_.peer < 0) context_.peer = peer;
  if (context_.step.empty()) context_.step = step;
  return std::move(*this);
}

Status Status::with_rank(int rank) && {
  if (context_.rank < 0) context_.rank = rank;
  return std::move(*this);
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string out = error_code_name(code_);
  std::string where;
  if (context_.rank >= 0) where += "rank " + std::to_string(context_.rank);
  if (context_.peer >= 0) where += (where.empty() ? "" : ", ") + std::string("peer ") + std::to_string(context_.peer);
  if (!context_.step.empty()) where += (where.empty() ? "" : ", ") + std::string("step ") + context_.step;
  if (!where.empty()) out += " (" + where + ")";
  out += ": " + message_;
  return out;
}

void check_failed(const char* expr, const char* file, int line, const char* why) {
  std::fprintf(stderr, "engramlab: contract violated: %s at %s:%d%s%s\n", expr, file, line, why ? ": " : "",
               why ? why : "");
  std::abort();
}

void result_value_on_error(const Status& status) {
  std::fprintf(stderr, "engramlab: contract violated: Result::value() on an error: %s\n", status.to_string().c_str());
  std::abort();
}

}  // namespace engram
