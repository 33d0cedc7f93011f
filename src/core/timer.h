// Wall-clock timing helpers.
#pragma once

#include <chrono>

namespace vi {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  double s() const { return ms() / 1000.0; }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace vi
