// StreamDecoder: holds incomplete UTF-8 between tokens (see stream_decoder.h).
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace vi {

std::string StreamDecoder::push(int32_t id) {
  const std::string& piece = tok_.token_to_piece(id);
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += piece;
  std::string out;
  const size_t used = tok::utf8_append_lossy(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::utf8_append_lossy(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace vi
