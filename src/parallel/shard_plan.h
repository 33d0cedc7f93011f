// How a tensor-parallel group splits a model: which heads, rows and columns each rank holds.
// Every split is contiguous and in rank order, so rank r's slice of a row-split projection
// multiplies exactly the activations its column-split projections produced, and gathering
// the ranks' parts in rank order rebuilds the whole. Sizes come from here, never from the
// config by hand (DESIGN.md, "Tensor parallel").
#pragma once

#include <cstdint>

namespace vi::parallel {

// Ranks a tensor-parallel group may have.
constexpr int kMaxWorld = 8;

// [begin, end) of some axis.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Rank `rank`'s part of n units split over `world` ranks: contiguous, in rank order, as even as
// can be (the first n % world ranks one unit more). Throws vi::Error for a world outside
// [1, kMaxWorld], a rank outside it, or fewer units than ranks (a rank would hold nothing).
Range split_range(int64_t n, int world, int rank, const char* what);

// The same split of n values counted in whole blocks of `block` values: the cut points fall on
// block boundaries, so a quantized matrix can be cut across its rows (the input axis of a
// row-split projection). n must be a multiple of block.
Range split_blocks(int64_t n, int64_t block, int world, int rank, const char* what);

// Attention heads of one rank under grouped-query attention; attention needs nothing from the
// other ranks. Up to as many ranks as KV heads: each rank holds whole KV heads, each with its
// whole group of query heads. More ranks, a whole number of them per KV head: the ranks of a KV
// head each hold a copy of it (its projection rows, its K/V cache) and a share of its query
// heads — how vLLM splits a model over more GPUs than KV heads.
struct HeadShard {
  Range kv_heads, q_heads;
};
// Throws vi::Error when the query heads do not group evenly over the KV heads, or the ranks
// outnumber the KV heads without a whole number of ranks per KV head and a query head for each.
HeadShard split_heads(int64_t n_head, int64_t n_kv_head, int world, int rank);

}  // namespace vi::parallel
