// Device memory in recorded steps.
// - Per-thread workspaces (backends/cuda/workspace.cuh): a request that fits returns the same
//   buffer, a larger one a new buffer while the old one stays allocated (a recorded step may still
//   use it), each thread has its own, and growing inside a recording works and leaves the
//   recording replayable.
// - ops::GraphShape of a recording: a kernel that waits on an allocation made after another
//   kernel is counted, one whose scratch was allocated before the first kernel is not.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/workspace.cuh"
#include "cuda_test_util.h"
#include "ops/graph.h"
#include "ops/memory.h"

namespace vi::cudatest {
namespace {

using cuda::WorkspaceSlot;

bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// data[i] = v for i < n.
__global__ void fill_kernel(uint32_t* data, int n, uint32_t v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) data[i] = v;
}

std::vector<uint32_t> read_back(const void* p, int n) {
  std::vector<uint32_t> h(static_cast<size_t>(n));
  VI_CUDA_CHECK(cudaMemcpy(h.data(), p, h.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  return h;
}

class Workspace : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ctx.device = Device::CUDA;
  }
  ops::Context ctx;
};

TEST_F(Workspace, ReusedWhileItFitsGrownBeyondOldBuffersStayAllocated) {
  const auto slot = WorkspaceSlot::kDecodeAttentionPartials;
  void* a = cuda::thread_workspace(ctx, slot, 1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(cuda::thread_workspace(ctx, slot, 10), a);
  EXPECT_EQ(cuda::thread_workspace(ctx, slot, 1000), a);
  const size_t big = size_t(8) << 20;
  void* b = cuda::thread_workspace(ctx, slot, big);
  EXPECT_NE(b, a);
  EXPECT_TRUE(is_device_memory(a)) << "the outgrown buffer must stay allocated";
  EXPECT_TRUE(is_device_memory(b));
  EXPECT_EQ(cuda::thread_workspace(ctx, slot, big / 2), b);
  // The whole requested size is usable.
  const int n = static_cast<int>(big / sizeof(uint32_t));
  fill_kernel<<<64, 256>>>(static_cast<uint32_t*>(b), n, 0xA5A5A5A5u);
  VI_CUDA_CHECK(cudaGetLastError());
  VI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint32_t> h = read_back(b, n);
  EXPECT_EQ(h.front(), 0xA5A5A5A5u);
  EXPECT_EQ(h.back(), 0xA5A5A5A5u);
}

TEST_F(Workspace, EachThreadHasItsOwn) {
  const auto slot = WorkspaceSlot::kDecodeAttentionPartials;
  void* mine = cuda::thread_workspace(ctx, slot, 4096);
  void* theirs = nullptr;
  std::thread t([&] {
    VI_CUDA_CHECK(cudaSetDevice(cuda::current_device().index));
    theirs = cuda::thread_workspace(ctx, slot, 4096);
  });
  t.join();
  ASSERT_NE(theirs, nullptr);
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(cuda::thread_workspace(ctx, slot, 4096), mine);
}

// A recording that grows the workspace and writes it: the recording succeeds (no allocation is
// captured), and each replay writes the buffer it was recorded with, even after a later request
// has moved the slot to a larger buffer.
TEST_F(Workspace, GrowsInsideARecordingWhichStaysReplayable) {
  if (!ops::graphs_supported(ctx)) GTEST_SKIP() << "no graphs on this device";
  const auto slot = WorkspaceSlot::kDecodeAttentionPartials;
  const size_t bytes = size_t(64) << 20;  // beyond what the tests above asked for
  void* inside = nullptr;
  uint32_t value = 1;
  std::unique_ptr<ops::Graph> g = ops::record(ctx, [&](ops::Context& rctx) {
    inside = cuda::thread_workspace(rctx, slot, bytes);
    fill_kernel<<<64, 256, 0, cuda::stream_of(rctx)>>>(static_cast<uint32_t*>(inside), 1024, 7u);
    VI_CUDA_CHECK(cudaGetLastError());
  });
  ASSERT_NE(inside, nullptr);
  void* later = cuda::thread_workspace(ctx, slot, 2 * bytes);  // the slot moves on
  EXPECT_NE(later, inside);
  VI_CUDA_CHECK(cudaMemset(inside, 0, 4096));
  g->launch(ctx);
  VI_CUDA_CHECK(cudaDeviceSynchronize());
  value = read_back(inside, 1024).back();
  EXPECT_EQ(value, 7u) << "the replay must write the buffer it was recorded with";
}

TEST_F(Workspace, GraphShapeCountsKernelsBehindMemory) {
  if (!ops::graphs_supported(ctx)) GTEST_SKIP() << "no graphs on this device";
  const int n = 4096;
  Tensor a = ops::empty(ctx, DType::I32, {n});
  auto fill = [&](ops::Context& c, const Tensor& t, uint32_t v) {
    fill_kernel<<<8, 256, 0, cuda::stream_of(c)>>>(static_cast<uint32_t*>(t.data()), n, v);
    VI_CUDA_CHECK(cudaGetLastError());
  };
  // Scratch allocated between two kernels: the second waits on the allocation.
  std::unique_ptr<ops::Graph> late = ops::record(ctx, [&](ops::Context& r) {
    fill(r, a, 1);
    Tensor s = ops::empty(r, DType::I32, {n});
    fill(r, s, 2);
  });
  EXPECT_EQ(late->shape().kernels, 2);
  EXPECT_GE(late->shape().memory_nodes, 1);
  EXPECT_EQ(late->shape().kernels_behind_memory, 1);
  // The same work with the scratch allocated first.
  std::unique_ptr<ops::Graph> early = ops::record(ctx, [&](ops::Context& r) {
    Tensor s = ops::empty(r, DType::I32, {n});
    fill(r, a, 1);
    fill(r, s, 2);
  });
  EXPECT_EQ(early->shape().kernels, 2);
  EXPECT_GE(early->shape().memory_nodes, 1);
  EXPECT_EQ(early->shape().kernels_behind_memory, 0);
  early->launch(ctx);
  late->launch(ctx);
  VI_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(read_back(a.data(), n).back(), 1u);
}

}  // namespace
}  // namespace vi::cudatest
