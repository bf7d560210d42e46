// Status and StatusOr: how every fallible operation in core/ reports failure.
//
// A Status carries a code (what kind of failure, used by fs/ to pick an errno in
// one place) and a message written for the user: it names the file, the tensor or
// the request, and says what is wrong or what to fix. No exception crosses a layer
// boundary; functions return Status or StatusOr<T>.
//
// Thread-safety: plain values; safe to copy across threads.
#ifndef TENSORFS_CORE_UTIL_STATUS_H_
#define TENSORFS_CORE_UTIL_STATUS_H_

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tensorfs {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,   // a bad option, path or request from the user
  kNotFound,          // no such object or tensor
  kPermissionDenied,  // credentials refused (401/403) or a local permission error
  kCorrupt,           // the bytes are there but malformed (a bad safetensors header)
  kStale,             // the object changed (generation mismatch, 412)
  kUnavailable,       // transient: server down, 5xx, connection reset; retryable
  kDeadlineExceeded,  // retries gave up
  kUnimplemented,     // a feature not supported (yet)
  kInternal,          // anything else
};

std::string_view ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: message" style, for logs and the CLI.
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (same code).
  Status WithContext(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {ErrorCode::kPermissionDenied, std::move(m)}; }
inline Status CorruptError(std::string m) { return {ErrorCode::kCorrupt, std::move(m)}; }
inline Status StaleError(std::string m) { return {ErrorCode::kStale, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) { return {ErrorCode::kDeadlineExceeded, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {ErrorCode::kUnimplemented, std::move(m)}; }
inline Status InternalError(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status. Accessing the value of an error aborts.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) { CheckNotOk(); }  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}                       // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & { CheckOk(); return std::get<T>(v_); }
  const T& value() const& { CheckOk(); return std::get<T>(v_); }
  T&& value() && { CheckOk(); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const;
  void CheckNotOk() const;
  std::variant<Status, T> v_;
};

[[noreturn]] void InternalFatal(std::string_view what);

template <typename T>
void StatusOr<T>::CheckOk() const {
  if (!ok()) InternalFatal("value() of an error StatusOr: " + std::get<Status>(v_).ToString());
}
template <typename T>
void StatusOr<T>::CheckNotOk() const {
  if (std::get<Status>(v_).ok()) InternalFatal("StatusOr constructed from an OK Status");
}

}  // namespace tensorfs

// Early return on error. RETURN_IF_ERROR(expr) for Status;
// ASSIGN_OR_RETURN(lhs, expr) for StatusOr.
#define TENSORFS_CONCAT_INNER(a, b) a##b
#define TENSORFS_CONCAT(a, b) TENSORFS_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::tensorfs::Status _st = (expr);                \
    if (!_st.ok()) return _st;                      \
  } while (0)
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(TENSORFS_CONCAT(_status_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

// Broken invariants abort loudly.
#define TENSORFS_CHECK(cond)                                                        \
  do {                                                                              \
    if (!(cond)) ::tensorfs::InternalFatal(__FILE__ ":" + std::to_string(__LINE__) + \
                                           ": check failed: " #cond);               \
  } while (0)

#endif  // TENSORFS_CORE_UTIL_STATUS_H_
