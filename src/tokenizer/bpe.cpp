// Byte-level BPE merging with a rank heap (see bpe.h).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace vi::tok {

Bpe::Bpe(std::unordered_map<std::string, int32_t> vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
         const std::string& origin)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  const auto& b2u = byte_to_utf8_table();
  for (int b = 0; b < 256; ++b) byte_id_[b] = find(b2u[b]);
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [l, rt] = merges[r];
    const int32_t a = find(l), b = find(rt), c = find(l + rt);
    if (a < 0 || b < 0) {
      throw FormatError(fmt::format("{}: merge {} '{} {}' names a token that is not in the vocabulary", origin, r,
                                    l, rt));
    }
    if (c < 0) {
      throw FormatError(
          fmt::format("{}: merge {} '{} {}' yields '{}', which is not in the vocabulary", origin, r, l, rt, l + rt));
    }
    // A repeated pair keeps its first (best) rank, as HF does.
    merges_.try_emplace(key(a, b), Merge{static_cast<int32_t>(r), c});
  }
}

Bpe::Bpe(Bpe&& o) noexcept
    : vocab_(std::move(o.vocab_)),
      merges_(std::move(o.merges_)),
      byte_id_(o.byte_id_),
      ignore_merges_(o.ignore_merges_),
      cache_(std::move(o.cache_)) {}

Bpe& Bpe::operator=(Bpe&& o) noexcept {
  vocab_ = std::move(o.vocab_);
  merges_ = std::move(o.merges_);
  byte_id_ = o.byte_id_;
  ignore_merges_ = o.ignore_merges_;
  cache_ = std::move(o.cache_);
  return *this;
}

int32_t Bpe::find(std::string_view text) const {
  auto it = vocab_.find(std::string(text));
  return it == vocab_.end() ? -1 : it->second;
}

void Bpe::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const int32_t id = find(bytes_to_byte_level(piece));
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // Symbols form a linked list over the original byte positions; position order breaks rank
  // ties, so a merge is identified by its left symbol's index.
  struct Sym {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(piece.size());
  for (unsigned char b : piece) {
    // A byte whose character is missing from the vocabulary is dropped, as HF BPE does with no
    // unk_token (byte-level vocabularies contain all 256, so this does not happen in practice).
    if (byte_id_[b] < 0) continue;
    const int32_t i = static_cast<int32_t>(syms.size());
    syms.push_back({byte_id_[b], i - 1, i + 1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Cand {
    int32_t rank, left, right_id, result;
  };
  auto worse = [](const Cand& x, const Cand& y) { return x.rank != y.rank ? x.rank > y.rank : x.left > y.left; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  auto push = [&](int32_t left) {
    const int32_t right = syms[left].next;
    if (left < 0 || right < 0) return;
    auto it = merges_.find(key(syms[left].id, syms[right].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, syms[right].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);

  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& l = syms[c.left];
    // Stale entries: the left symbol was merged away (id -1) or changed, or its right
    // neighbour is no longer the symbol this candidate was made for.
    if (l.id < 0 || l.next < 0) continue;
    Sym& r = syms[l.next];
    auto it = merges_.find(key(l.id, r.id));
    if (r.id != c.right_id || it == merges_.end() || it->second.rank != c.rank) continue;
    l.id = c.result;
    const int32_t nn = r.next;
    r.id = -1;
    l.next = nn;
    if (nn >= 0) syms[nn].prev = c.left;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kCacheMaxPiece) {
    merge_word(piece, out);
    return;
  }
  std::string key_str(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key_str);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheMax) cache_.clear();
  cache_.emplace(std::move(key_str), std::move(ids));
}

}  // namespace vi::tok
