#include "parallel/shard_plan.h"

#include <algorithm>

#include "core/error.h"

namespace vi::parallel {

Range split_range(int64_t n, int world, int rank, const char* what) {
  VI_CHECK(world >= 1 && world <= kMaxWorld, "tensor parallel over {} ranks: 1 to {} are supported", world, kMaxWorld);
  VI_CHECK(rank >= 0 && rank < world, "rank {} is not one of the {} ranks", rank, world);
  VI_CHECK(n >= world, "tensor parallel over {} ranks needs at least {} {} to split; this model has {}", world, world,
           what, n);
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Range split_blocks(int64_t n, int64_t block, int world, int rank, const char* what) {
  VI_CHECK(block >= 1 && n % block == 0, "{}: {} values do not make whole blocks of {}", what, n, block);
  const Range b = split_range(n / block, world, rank, what);
  return {b.begin * block, b.end * block};
}

HeadShard split_heads(int64_t n_head, int64_t n_kv_head, int world, int rank) {
  VI_CHECK(n_kv_head >= 1 && n_head % n_kv_head == 0, "{} attention heads do not group over {} KV heads", n_head,
           n_kv_head);
  const int64_t group = n_head / n_kv_head;
  HeadShard s;
  if (world <= n_kv_head) {
    s.kv_heads = split_range(n_kv_head, world, rank, "KV heads");
    s.q_heads = {s.kv_heads.begin * group, s.kv_heads.end * group};
    return s;
  }
  VI_CHECK(world >= 1 && world <= kMaxWorld, "tensor parallel over {} ranks: 1 to {} are supported", world, kMaxWorld);
  VI_CHECK(rank >= 0 && rank < world, "rank {} is not one of the {} ranks", rank, world);
  VI_CHECK(world % n_kv_head == 0,
           "tensor parallel over {} ranks needs at least {} KV heads to split, or a whole number of ranks for each "
           "of its {} KV heads (a multiple of {} ranks)",
           world, world, n_kv_head, n_kv_head);
  const int shared_by = static_cast<int>(world / n_kv_head);  // ranks holding each KV head
  const int64_t kv = rank / shared_by;
  const Range q = split_range(group, shared_by, rank % shared_by, "query heads for each KV head");
  s.kv_heads = {kv, kv + 1};
  s.q_heads = {kv * group + q.begin, kv * group + q.end};
  return s;
}

}  // namespace vi::parallel
