// The A/B switches of the CUDA backend (docs/PERFORMANCE.md lists them): environment variables
// that turn one kernel choice off when set to "0". Plain C++, for the host side of the .cu files.
#pragma once

#include <cstdlib>
#include <cstring>

namespace vi::cuda {

// False when the environment variable `name` is "0", else true. Callers read it once (a
// function-local static), so a switch holds for the whole process.
inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

// A switch that may be forced either way: -1 where `name` is unset (the caller's default applies),
// 0 where it is "0", 1 for any other value.
inline int env_switch_forced(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::strcmp(v, "0") != 0;
}

}  // namespace vi::cuda
