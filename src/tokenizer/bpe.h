// Byte-level BPE model: a vocabulary of byte-level strings and ranked merges. Encodes one
// pre-tokenized piece (raw bytes) into ids the way HF `tokenizers` BPE does: start from one
// symbol per byte, repeatedly apply the lowest-ranked merge (leftmost on ties) until none
// applies. Results are cached per piece because text repeats words heavily.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vi::tok {

class Bpe {
 public:
  Bpe() = default;
  // vocab: byte-level token text -> id. merges: (left, right) texts, highest priority first.
  // Throws vi::FormatError (mentioning `origin`) when a merge names text outside the vocab.
  // ignore_merges: a piece that is itself a vocab entry maps to it directly (HF option).
  Bpe(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges, const std::string& origin);

  Bpe(Bpe&& o) noexcept;
  Bpe& operator=(Bpe&& o) noexcept;

  // Appends the ids for `piece` (raw bytes, not byte-level text). Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // Byte-level text -> id, or -1.
  int32_t find(std::string_view text) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_id_{};  // id of each single byte's character, -1 if absent
  bool ignore_merges_ = false;

  static constexpr size_t kCacheMax = 200000;   // entries; the cache is cleared when full
  static constexpr size_t kCacheMaxPiece = 256;  // longer pieces are rare and not cached
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace vi::tok
