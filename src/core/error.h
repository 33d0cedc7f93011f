// voltinfer error type. Every failure that a user can cause (bad file, bad flag,
// bad request) becomes a vi::Error with a message that names what was wrong;
// programming errors use the same type so that nothing aborts silently.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace vi {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown for malformed model files; the message names the file and, where known, the tensor.
class FormatError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} ({}:{})", msg, file, line));
}

}  // namespace vi

// VI_CHECK(cond, "format {}", args...) throws vi::Error with file:line when cond is false.
#define VI_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) ::vi::fail_at(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

#define VI_FAIL(...) ::vi::fail_at(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
