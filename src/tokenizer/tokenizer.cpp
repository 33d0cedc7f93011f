// vi::Tokenizer encode/decode and accessors; the loaders are in load_gguf.cpp and
// load_tokenizer_json.cpp, shared state in tokenizer_impl.h.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace vi {

namespace {

// Markers that end a turn or a document in the model families we load (llama.cpp treats the
// same set as end-of-generation).
constexpr std::string_view kEndOfTurn[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>",
                                           "<|END_OF_TURN_TOKEN|>"};
constexpr std::string_view kOtherStops[] = {"<|endoftext|>", "<|eom_id|>", "<|end_of_text|>", "<|return|>",
                                            "<|call|>", "</s>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>",
                                            "<|end|>"};

}  // namespace

void Tokenizer::Impl::finish(bool raw_added_text) {
  const size_t n = text.size();
  attr.resize(n, TokenAttr::kUnused);
  piece.assign(n, std::string());
  for (size_t i = 0; i < n; ++i) {
    const bool added = attr[i] == TokenAttr::kControl || attr[i] == TokenAttr::kUserDefined;
    if (added && raw_added_text) {
      piece[i] = text[i];
    } else if (auto bytes = tok::byte_level_to_bytes(text[i])) {
      piece[i] = std::move(*bytes);
    } else {
      piece[i] = text[i];  // HF ByteLevel decoder: a token with foreign characters stays as is
    }
  }
  if (eot < 0) {
    for (auto name : kEndOfTurn) {
      auto it = added_by_content.find(std::string(name));
      if (it != added_by_content.end()) {
        eot = it->second;
        break;
      }
    }
  }
  is_stop.assign(n, false);
  auto add_stop = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < n && !is_stop[id]) {
      is_stop[id] = true;
      stops.push_back(id);
    }
  };
  add_stop(eos);
  add_stop(eot);
  add_stop(eom);
  for (auto name : kOtherStops) {
    auto it = added_by_content.find(std::string(name));
    if (it != added_by_content.end()) add_stop(it->second);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!tok::utf8_is_valid(text)) {
    repaired = tok::utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special) ids.insert(ids.end(), m.prefix.begin(), m.prefix.end());

  std::vector<std::string> pieces;
  auto encode_plain = [&](std::string_view plain) {
    pieces.clear();
    m.pre.split(plain, pieces);
    for (const auto& p : pieces) m.bpe.encode(p, ids);
  };
  // Normalise, then cut out the added tokens that are matched on normalised text.
  auto encode_segment = [&](std::string_view seg) {
    std::string normalized;
    if (m.nfc && !tok::is_nfc(seg)) {
      normalized = tok::nfc(seg);
      seg = normalized;
    }
    if (!m.added.has_normalized()) {
      encode_plain(seg);
      return;
    }
    std::vector<tok::AddedTokenMatcher::Segment> inner;
    m.added.split(seg, parse_special, true, inner);
    for (const auto& s : inner) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        encode_plain(seg.substr(s.begin, s.end - s.begin));
      }
    }
  };

  if (m.added.empty()) {
    encode_segment(text);
  } else {
    std::vector<tok::AddedTokenMatcher::Segment> segs;
    m.added.split(text, parse_special, false, segs);
    for (const auto& s : segs) {
      if (s.id >= 0) {
        ids.push_back(s.id);
      } else {
        encode_segment(text.substr(s.begin, s.end - s.begin));
      }
    }
  }
  if (add_special) ids.insert(ids.end(), m.suffix.begin(), m.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_to_piece(id);
  }
  if (tok::utf8_is_valid(bytes)) return bytes;
  return tok::utf8_lossy(bytes);
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  VI_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id {} out of range [0, {})", id, n_vocab());
  return impl_->piece[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  VI_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id {} out of range [0, {})", id, n_vocab());
  return impl_->text[id];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->added_by_content.find(std::string(text));
  if (it != impl_->added_by_content.end()) return it->second;
  const int32_t id = impl_->bpe.find(text);
  if (id >= 0) return id;
  return std::nullopt;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->text.size()); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::adds_bos() const { return !impl_->prefix.empty(); }

TokenAttr Tokenizer::attr(int32_t id) const {
  VI_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id {} out of range [0, {})", id, n_vocab());
  return impl_->attr[id];
}

bool Tokenizer::is_special(int32_t id) const { return attr(id) == TokenAttr::kControl; }

const std::vector<int32_t>& Tokenizer::stop_tokens() const { return impl_->stops; }

bool Tokenizer::is_stop(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->is_stop[id]; }

}  // namespace vi
