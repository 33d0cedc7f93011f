// PrefixIndex: hash maps of cached blocks and snapshots, and the longest-prefix lookup.
#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace vi {

namespace {
// splitmix64 finaliser: a cheap, well-mixed 64-bit permutation.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t chain_key(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ (0x100000001b3ull * (tokens.size() + 1)));
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;
}

PrefixIndex::Block* PrefixIndex::find_block(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) {
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.parent != parent || !std::ranges::equal(it->second.tokens, tokens))
    return nullptr;
  return &it->second;
}

PrefixIndex::Block* PrefixIndex::block(uint64_t key) {
  auto it = blocks_.find(key);
  return it == blocks_.end() ? nullptr : &it->second;
}

bool PrefixIndex::add_block(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, Location loc) {
  return blocks_.emplace(key, Block{parent, {tokens.begin(), tokens.end()}, loc}).second;
}

void PrefixIndex::erase_block(uint64_t key) { blocks_.erase(key); }

const PrefixIndex::Snapshot* PrefixIndex::find_snapshot(uint64_t parent, std::span<const int32_t> tail) const {
  auto [b, e] = snaps_by_parent_.equal_range(parent);
  for (auto it = b; it != e; ++it) {
    const Snapshot& s = snaps_.at(it->second);
    if (std::ranges::equal(s.tail, tail)) return &s;
  }
  return nullptr;
}

PrefixIndex::Snapshot* PrefixIndex::snapshot(uint64_t id) {
  auto it = snaps_.find(id);
  return it == snaps_.end() ? nullptr : &it->second;
}

uint64_t PrefixIndex::add_snapshot(uint64_t parent, int64_t pos, std::span<const int32_t> tail, Location loc) {
  const uint64_t id = next_snap_id_++;
  snaps_.emplace(id, Snapshot{id, parent, pos, {tail.begin(), tail.end()}, loc});
  snaps_by_parent_.emplace(parent, id);
  return id;
}

void PrefixIndex::erase_snapshot(uint64_t id) {
  auto it = snaps_.find(id);
  if (it == snaps_.end()) return;
  auto [b, e] = snaps_by_parent_.equal_range(it->second.parent);
  for (auto p = b; p != e; ++p)
    if (p->second == id) {
      snaps_by_parent_.erase(p);
      break;
    }
  snaps_.erase(it);
}

PrefixIndex::Match PrefixIndex::longest_match(std::span<const int32_t> prompt, int64_t bs, int64_t max_pos,
                                              bool need_state) {
  VI_CHECK(bs > 0, "block size {} must be positive", bs);
  max_pos = std::min<int64_t>(max_pos, static_cast<int64_t>(prompt.size()));
  Match m;
  m.keys.push_back(kRootKey);
  for (int64_t j = 0; (j + 1) * bs <= max_pos; ++j) {
    auto toks = prompt.subspan(static_cast<size_t>(j * bs), static_cast<size_t>(bs));
    const uint64_t key = chain_key(m.keys.back(), toks);
    if (!find_block(key, m.keys.back(), toks)) break;
    m.keys.push_back(key);
  }
  const int64_t n_matched = static_cast<int64_t>(m.keys.size()) - 1;
  if (!need_state) m.pos = n_matched * bs;
  for (int64_t j = 0; j <= n_matched; ++j) {
    auto [b, e] = snaps_by_parent_.equal_range(m.keys[static_cast<size_t>(j)]);
    for (auto it = b; it != e; ++it) {
      const Snapshot& s = snaps_.at(it->second);
      const int64_t pos = j * bs + static_cast<int64_t>(s.tail.size());
      if (pos > max_pos || pos <= m.pos) continue;
      if (!std::ranges::equal(s.tail, prompt.subspan(static_cast<size_t>(j * bs), s.tail.size()))) continue;
      m.pos = pos;
      m.snap = &s;
    }
  }
  return m;
}

}  // namespace vi
