// Stop strings on streamed text: text is released only once no stop string can begin in
// it, so a stop string split across tokens ("Obs" + "ervation:") is still caught and never
// reaches the client, even in part. The engine knows nothing of text; this runs on the
// HTTP thread that owns the request.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vi::server {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  // Appends `text`; returns what is now safe to emit. After a match, returns the text
  // before the earliest match and nothing more (matched() becomes true).
  std::string push(std::string_view text);
  // Releases what is held back (generation ended without a match).
  std::string flush();

  bool matched() const { return matched_.has_value(); }
  // The stop string that matched (for Anthropic's stop_sequence).
  const std::string& matched_stop() const { return *matched_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings only
  std::string held_;                // text that may be the start of a stop string
  std::optional<std::string> matched_;
};

}  // namespace vi::server
