#pragma once
// DTRAIN_CHECK(cond) << "context"; throws InternalError naming file:line when an invariant breaks.
// For errors a user can cause, throw UserError (error.h) with the fix instead.
#include <sstream>
#include <stdexcept>
#include <string>

namespace dtrain::core {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr) {
    stream_ << file << ":" << line << ": check failed: " << expr << " ";
  }
  [[noreturn]] ~CheckFailure() noexcept(false) { throw InternalError(stream_.str()); }
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace dtrain::core

#define DTRAIN_CHECK(cond) \
  if (cond) {              \
  } else                   \
    ::dtrain::core::detail::CheckFailure(__FILE__, __LINE__, #cond)
