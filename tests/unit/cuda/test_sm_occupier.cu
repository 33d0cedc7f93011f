// SmOccupier (backends/cuda/sm_occupier.h), the benchmarks' emulation of a card with fewer SMs:
//  - while it holds n SMs, a kernel of many blocks on the work stream runs on none of them, the
//    kernels' usable SM count is the rest, and the held SMs are n distinct ones;
//  - after the release every SM is usable again, and a second hold works;
//  - holding blocks that outlive their guard make release() fail (a benchmark whose timed work
//    did not all run with the SMs held must not report it);
//  - n = 0 holds nothing, and n must leave an SM.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/sm_id.cuh"
#include "backends/cuda/sm_occupier.h"
#include "core/error.h"

namespace vi::cudatest {
namespace {

// Before the first CUDA call (static initialization runs before gtest's main): eager module
// loading, so that this file's kernel does not wait for the release at its first launch.
[[maybe_unused]] const bool kEnvironment = [] {
  cuda::set_sm_occupier_environment();
  return true;
}();

__global__ void record_sm_kernel(int* sms, long long spin) {
  if (threadIdx.x != 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  sms[blockIdx.x] = cuda::sm_id();
}

class SmOccupierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    if (!cuda::SmOccupier::supported()) GTEST_SKIP() << "one block cannot fill an SM of this device (before sm_80)";
    VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    sms = cuda::current_device().sm_count;
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  // The SMs that `blocks` short blocks on the work stream ran on.
  std::set<int> ran_on(int blocks) {
    int* d = nullptr;
    VI_CUDA_CHECK(cudaMalloc(&d, sizeof(int) * blocks));
    record_sm_kernel<<<blocks, 32, 0, stream>>>(d, 20000);
    VI_CUDA_LAUNCH_CHECK();
    std::vector<int> h(static_cast<size_t>(blocks));
    VI_CUDA_CHECK(cudaMemcpyAsync(h.data(), d, sizeof(int) * blocks, cudaMemcpyDeviceToHost, stream));
    VI_CUDA_CHECK(cudaStreamSynchronize(stream));
    // no cudaFree here: it would wait for the whole device, the holding blocks too
    leaked.push_back(d);
    return {h.begin(), h.end()};
  }
  void free_leaked() {
    for (int* p : leaked) cudaFree(p);
    leaked.clear();
  }
  cudaStream_t stream = nullptr;
  int sms = 0;
  std::vector<int*> leaked;
};

TEST_F(SmOccupierTest, WorkRunsOnlyOnTheSmsLeftAndAllOfThemAfterTheRelease) {
  if (sms < 4) GTEST_SKIP() << "too few SMs to hold a quarter";
  const int n = sms / 4;
  {
    cuda::SmOccupier occ(n);
    EXPECT_EQ(cuda::current_device().sm_count, sms - n);
    EXPECT_EQ(occ.usable_sms(), sms - n);
    for (int round = 0; round < 2; ++round) {
      occ.hold(stream);
      const std::vector<int> held = occ.held_sm_ids();
      ASSERT_EQ(static_cast<int>(held.size()), n);
      const std::set<int> held_set(held.begin(), held.end());
      EXPECT_EQ(static_cast<int>(held_set.size()), n) << "two holding blocks on one SM";
      const std::set<int> ran = ran_on(64 * sms);
      for (int sm : ran) EXPECT_EQ(held_set.count(sm), 0u) << "a work block ran on held SM " << sm;
      // The work spreads over the free SMs (64 blocks an SM's worth of short blocks reach most of them).
      EXPECT_GE(static_cast<int>(ran.size()), (sms - n) / 2);
      occ.release();
      EXPECT_TRUE(occ.held_sm_ids().empty());
      free_leaked();
    }
  }
  EXPECT_EQ(cuda::current_device().sm_count, sms);
  const std::set<int> ran = ran_on(64 * sms);
  EXPECT_GT(static_cast<int>(ran.size()), sms - n) << "after the occupier, work reaches SMs it held";
  free_leaked();
}

TEST_F(SmOccupierTest, ReleaseFailsWhenTheGuardEndedTheHoldFirst) {
  cuda::SmOccupier occ(1, /*guard_s=*/0.05);
  occ.hold(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_THROW(occ.release(), Error);
  occ.hold(stream);  // the occupier is usable again
  occ.release();
}

TEST_F(SmOccupierTest, HoldsNothingForZeroAndRefusesToHoldEverySm) {
  cuda::SmOccupier none(0);
  none.hold(stream);
  EXPECT_TRUE(none.held_sm_ids().empty());
  EXPECT_EQ(cuda::current_device().sm_count, sms);
  none.release();
  EXPECT_THROW({ cuda::SmOccupier all(sms); }, Error);
  EXPECT_EQ(cuda::current_device().sm_count, sms);
}

}  // namespace
}  // namespace vi::cudatest
