// Stop-string matching with hold-back (see stop_strings.h).
#include "server/stop_strings.h"

#include <algorithm>

namespace vi::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringFilter::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  // The stop string completed first wins (generation would have stopped there); of two
  // completed by the same byte, the longer.
  size_t best = std::string::npos, best_end = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
      best_stop = &s;
    }
  }
  if (best_stop) {
    matched_ = *best_stop;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace vi::server
