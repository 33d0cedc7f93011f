// The benchmarks' SM partition (backends/cuda/sm_partition.h), an emulation of a card with more
// memory bandwidth per SM:
//  - bad SM counts are refused;
//  - after restrict_graphs_to_sms(n), a recorded graph's blocks run on at most the partition's SMs
//    (and reach most of them), while kernels launched outside graphs still reach more SMs than
//    that (so the probe can tell), and the kernels' usable SM count is the partition's;
//  - a replay sees what the caller's stream wrote before it, and the caller's stream sees what the
//    replay wrote (the fences of backends/cuda/graph.cu), with a slow writer before the replay;
//  - two threads record on the partition at the same time (each on its own stream of it) and
//    replay what they recorded.
// The partition cannot be undone in a process: the second test makes it; the order of the checks
// inside it matters.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/sm_partition.h"
#include "core/error.h"
#include "ops/graph.h"
#include "ops/memory.h"

namespace vi::cudatest {
namespace {

__device__ __forceinline__ int sm_id() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__global__ void record_sm_kernel(int* sms, long long spin) {
  if (threadIdx.x != 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  sms[blockIdx.x] = sm_id();
}

// x[i] = base + i, after `spin` cycles: a writer the replay after it must wait for.
__global__ void slow_write_kernel(float* x, int n, float base, long long spin) {
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = base + static_cast<float>(i);
}

__global__ void add_one_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

class SmPartition : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::string why;
    int drv = 0;
    VI_CUDA_CHECK(cudaDriverGetVersion(&drv));
    // Where the build and the driver are new enough, a failed lookup is a failure, not a skip.
    if (CUDART_VERSION >= 12050 && drv >= 12050) ASSERT_TRUE(cuda::sm_partition_supported(&why)) << why;
    if (!cuda::sm_partition_supported(&why)) GTEST_SKIP() << why;
    ctx.device = Device::CUDA;
    if (!ops::graphs_supported(ctx)) GTEST_SKIP() << "no CUDA graphs on this device";
    cudaDeviceProp p{};
    VI_CUDA_CHECK(cudaGetDeviceProperties(&p, cuda::current_device().index));
    all_sms = p.multiProcessorCount;
    blocks = 16 * all_sms;  // enough short blocks to reach every SM they may run on
    sms_buf = ops::empty(ctx, DType::I32, {blocks});
  }
  // The distinct SMs the probe's blocks ran on; launched by `launch(stream)`.
  template <class Launch>
  std::set<int> ran_on(Launch&& launch) {
    launch();
    VI_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int> h(static_cast<size_t>(blocks));
    VI_CUDA_CHECK(cudaMemcpy(h.data(), sms_buf.data(), sizeof(int) * blocks, cudaMemcpyDeviceToHost));
    return {h.begin(), h.end()};
  }
  void probe(cudaStream_t s) {
    record_sm_kernel<<<blocks, 32, 0, s>>>(sms_buf.ptr<int>(), 20000);
    VI_CUDA_LAUNCH_CHECK();
  }
  ops::Context ctx;
  int all_sms = 0, blocks = 0;
  Tensor sms_buf;
};

TEST_F(SmPartition, RefusesCountsOutsideTheDevice) {
  EXPECT_THROW(cuda::restrict_graphs_to_sms(0), Error);
  EXPECT_THROW(cuda::restrict_graphs_to_sms(-8), Error);
  EXPECT_THROW(cuda::restrict_graphs_to_sms(all_sms + 1), Error);
}

TEST_F(SmPartition, GraphsRunOnItsSmsAndInOrderWithTheCallersStream) {
  const bool fresh = cuda::partition_sms() == 0;
  const int eager_before = ran_on([&] { probe(nullptr); }).size();
  const int asked = all_sms / 2;
  const int used = cuda::restrict_graphs_to_sms(asked);
  std::printf("[ info     ] graphs on %d of %d SMs (asked %d); before, eager blocks reached %d\n", used, all_sms,
              asked, eager_before);
  ASSERT_GE(used, asked);
  ASSERT_LT(used, all_sms) << "a partition of half the SMs took all of them";
  EXPECT_EQ(cuda::partition_sms(), used);
  EXPECT_EQ(cuda::current_device().sm_count, used) << "the kernels would size their grids for every SM";
  EXPECT_EQ(cuda::restrict_graphs_to_sms(asked), used) << "asking again for the same is a no-op";
  EXPECT_THROW(cuda::restrict_graphs_to_sms(asked + 8 <= all_sms ? asked + 8 : asked - 8), Error)
      << "a second, different partition";
  if (fresh) EXPECT_GT(eager_before, used) << "the probe cannot tell a partition from none";

  std::unique_ptr<ops::Graph> g = ops::record(ctx, [&](ops::Context& r) { probe(cuda::stream_of(r)); });
  const std::set<int> in_graph = ran_on([&] { g->launch(ctx); });
  EXPECT_LE(static_cast<int>(in_graph.size()), used) << "a graph's blocks ran outside the partition";
  EXPECT_GE(static_cast<int>(in_graph.size()), used * 3 / 4) << "a graph's blocks reached few of the partition's SMs";
  const std::set<int> eager_after = ran_on([&] { probe(nullptr); });
  EXPECT_GT(static_cast<int>(eager_after.size()), used) << "work outside graphs is confined too";

  // Order: a slow writer on the caller's (legacy) stream, the replay, a copy back on that stream.
  constexpr int n = 1 << 16;
  Tensor x = ops::empty(ctx, DType::F32, {n}), y = ops::empty(ctx, DType::F32, {n});
  std::unique_ptr<ops::Graph> add = ops::record(ctx, [&](ops::Context& r) {
    add_one_kernel<<<n / 256, 256, 0, cuda::stream_of(r)>>>(x.ptr<float>(), y.ptr<float>(), n);
    VI_CUDA_LAUNCH_CHECK();
  });
  std::vector<float> h(n);
  for (int rep = 0; rep < 4; ++rep) {
    const float base = 1000.0f * (rep + 1);
    slow_write_kernel<<<n / 256, 256>>>(x.ptr<float>(), n, base, 2000000);  // about 1 ms
    VI_CUDA_LAUNCH_CHECK();
    add->launch(ctx);
    VI_CUDA_CHECK(cudaMemcpy(h.data(), y.data(), sizeof(float) * n, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += h[i] != base + static_cast<float>(i) + 1.0f;
    EXPECT_EQ(bad, 0) << "replay " << rep << ": outputs not of this replay's input";
  }

  // Two threads whose recordings overlap: each body waits until both have begun capturing.
  std::atomic<int> capturing{0};
  std::string errors[2];
  bool overlapped[2] = {false, false};
  int bad[2] = {-1, -1};
  auto worker = [&](int id) {
    try {
      VI_CUDA_CHECK(cudaSetDevice(cuda::current_device().index));
      Tensor xt = ops::empty(ctx, DType::F32, {n}), yt = ops::empty(ctx, DType::F32, {n});
      std::vector<float> in(n), out(n);
      for (int i = 0; i < n; ++i) in[i] = static_cast<float>(id * n + i);
      VI_CUDA_CHECK(cudaMemcpy(xt.data(), in.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
      std::unique_ptr<ops::Graph> mine = ops::record(ctx, [&](ops::Context& r) {
        capturing.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (capturing.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        overlapped[id] = capturing.load() >= 2;
        add_one_kernel<<<n / 256, 256, 0, cuda::stream_of(r)>>>(xt.ptr<float>(), yt.ptr<float>(), n);
        VI_CUDA_LAUNCH_CHECK();
      });
      for (int rep = 0; rep < 3; ++rep) mine->launch(ctx);
      VI_CUDA_CHECK(cudaMemcpy(out.data(), yt.data(), sizeof(float) * n, cudaMemcpyDeviceToHost));
      bad[id] = 0;
      for (int i = 0; i < n; ++i) bad[id] += out[i] != in[i] + 1.0f;
    } catch (const std::exception& e) {
      capturing.fetch_add(1);  // the other thread need not wait out its timeout
      errors[id] = e.what();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  for (int id = 0; id < 2; ++id) {
    EXPECT_EQ(errors[id], "") << "thread " << id;
    EXPECT_TRUE(overlapped[id]) << "thread " << id << ": the recordings did not overlap";
    EXPECT_EQ(bad[id], 0) << "thread " << id << ": outputs not of its own input";
  }
}

}  // namespace
}  // namespace vi::cudatest
