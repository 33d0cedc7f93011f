#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

namespace vi {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 7, 64, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    for (int rep = 0; rep < 50; ++rep) {
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 50) << "n=" << n << " i=" << i;
  }
}

// Jobs of alternating size back to back: a worker still leaving the previous (smaller)
// job must never take a chunk of the next one under the old generation (that ran chunks
// twice and could hang the caller). Every index must be visited exactly once per job.
TEST(ThreadPool, AlternatingJobSizesRunEachChunkOnce) {
  ThreadPool pool(4);  // more threads than this machine's cores: workers get preempted
  std::vector<std::atomic<int>> hits(64);
  for (int rep = 0; rep < 200000; ++rep) {
    const int64_t n = rep % 2 ? 64 : 2 + rep % 3;
    for (int64_t i = 0; i < n; ++i) hits[i] = 0;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "rep " << rep << " i " << i;
  }
}

TEST(ThreadPool, GrainLimitsChunks) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(10, 100, [&](int64_t b, int64_t e, int) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    calls++;
  });
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace vi
