// parallel/cuda/mailbox_communicator on one GPU: the ranks are threads with streams of their own on
// device 0, the mailbox in device memory and in pinned host memory (the peer mailbox needs two
// GPUs: only its refusal is tested where there is one).
//
// The sums and gathers must be the host communicator's bits for the same inputs (an f32 sum in
// rank order, rounded once), also when many collectives are queued back to back, when a tensor
// takes several rounds of the slot, and when a recorded CUDA graph replays them; and a mismatch,
// a rank that never comes, or an abort must end the collectives with an error naming the cause,
// never a hang — after reset() the group works again.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/mailbox_communicator.h"
#include "parallel/rank_threads.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi::parallel {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

#define CK(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr milliseconds kNoHang(60000);
constexpr MailboxPlace kOneGpuPlaces[] = {MailboxPlace::kDevice, MailboxPlace::kHost};
constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

// The process's random source (test::test_seed: VI_TEST_SEED replays a run).
std::mt19937& rng() {
  static std::mt19937 g(test::test_seed());
  return g;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear it, count none
    return 0;
  }
  return n;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

uint32_t bits_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::F32) return fp32_to_bits(t.ptr<float>()[i]);
  return t.ptr<uint16_t>()[i];
}

// A host tensor of n random values of dtype t (normal, some exact zeros of either sign, some
// values that the other ranks cancel: sums whose rounding and sign matter).
Tensor random_host(DType t, const std::vector<int64_t>& shape) {
  Tensor h = Tensor::empty(t, shape);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  auto& g = rng();
  for (int64_t i = 0; i < h.numel(); ++i) {
    float v = nd(g);
    if (i % 17 == 0) v = (i % 34 == 0) ? -0.0f : 0.0f;
    if (t == DType::F32) h.ptr<float>()[i] = v;
    else if (t == DType::F16) h.ptr<uint16_t>()[i] = fp32_to_fp16(v);
    else h.ptr<uint16_t>()[i] = fp32_to_bf16(v);
  }
  return h;
}

Tensor copy_host(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// What the host communicator makes of `in` (one tensor per rank): the reference bits.
std::vector<Tensor> host_reduce(const std::vector<Tensor>& in) {
  const int world = static_cast<int>(in.size());
  auto comm = make_host_communicator(world, kNoHang);
  RankThreads threads(world, comm.get());
  std::vector<Tensor> xs;
  for (const Tensor& t : in) xs.push_back(copy_host(t));
  threads.run([&](int r) { comm->all_reduce_sum(r, xs[r], nullptr); });
  return xs;
}

// A device buffer of a host tensor's shape and dtype, owned by the test (cudaMalloc, so that it
// outlives any stream).
struct DevTensor {
  void* p = nullptr;
  Tensor t;
  explicit DevTensor(const Tensor& like) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(like.nbytes(), 16)), cudaSuccess);
    t = Tensor::view(like.dtype(), like.shape(), p, nullptr, Device::CUDA);
  }
  ~DevTensor() { cudaFree(p); }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
};

// world ranks on device 0: a stream each and the threads that run them. The tests allocate device
// memory before the ranks start queueing collectives: an allocation may keep kernels queued after
// it from running beside kernels queued before it (the CUDA guide's implicit synchronisation),
// and a collective whose partner cannot start would only time out.
struct GpuRanks {
  static constexpr size_t kScratch = 65536;  // bytes of each rank's two scratch buffers
  std::unique_ptr<Communicator> comm;
  std::vector<cudaStream_t> streams;
  std::vector<void*> scratch;  // rank r's: 2r and 2r + 1
  std::unique_ptr<RankThreads> threads;

  GpuRanks(int world, const MailboxOptions& opt) {
    comm = make_mailbox_communicator(std::vector<int>(world, 0), opt);
    streams.resize(world);
    for (auto& s : streams) EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    scratch.resize(2 * world);
    for (auto& p : scratch) EXPECT_EQ(cudaMalloc(&p, kScratch), cudaSuccess);
    threads = std::make_unique<RankThreads>(world, comm.get());
  }
  ~GpuRanks() {
    threads.reset();
    comm.reset();
    for (auto& s : streams) cudaStreamDestroy(s);
    for (auto& p : scratch) cudaFree(p);
  }
  void run(const std::function<void(int)>& fn) { threads->run(fn); }
  // A device tensor over rank r's scratch buffer i (0 or 1).
  Tensor view(int r, int i, DType t, const std::vector<int64_t>& shape) {
    Tensor v = Tensor::view(t, shape, scratch[2 * r + i], nullptr, Device::CUDA);
    EXPECT_LE(v.nbytes(), kScratch);
    return v;
  }
};

MailboxOptions options(MailboxPlace place, size_t slot_bytes = size_t{1} << 20, milliseconds timeout = kNoHang,
                       int pace_host = -1) {
  MailboxOptions o;
  o.place = place;
  o.slot_bytes = slot_bytes;
  o.timeout = timeout;
  o.pace_host = pace_host;
  return o;
}

std::string label(MailboxPlace p, int world, DType t) {
  return fmt::format("{}, {} ranks, {}", mailbox_place_name(p), world, dtype_name(t));
}

class MailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// K all-reduces queued back to back on every rank (no host wait between them), then compared.
// A slot of 64 KiB makes the 70001-value tensors take 5 to 18 rounds.
TEST_F(MailboxTest, SumsAreTheHostCommunicatorsBits) {
  constexpr int K = 6;
  const int64_t sizes[K] = {1, 7, 5120, 70001, 0, 257};
  for (MailboxPlace place : kOneGpuPlaces)
    for (int world = 1; world <= 4; ++world)
      for (DType t : kFloatTypes) {
        SCOPED_TRACE(label(place, world, t));
        GpuRanks g(world, options(place, 65536));
        std::vector<std::vector<Tensor>> in(K), want(K);
        for (int k = 0; k < K; ++k) {
          for (int r = 0; r < world; ++r) in[k].push_back(random_host(t, {sizes[k]}));
          want[k] = host_reduce(in[k]);
        }
        std::vector<std::vector<Tensor>> got(world);
        std::vector<std::vector<std::unique_ptr<DevTensor>>> devs(world);
        for (int r = 0; r < world; ++r)
          for (int k = 0; k < K; ++k) devs[r].push_back(std::make_unique<DevTensor>(in[k][r]));
        g.run([&](int r) {
          auto& dev = devs[r];
          for (int k = 0; k < K; ++k)
            cudaMemcpyAsync(dev[k]->p, in[k][r].data(), in[k][r].nbytes(), cudaMemcpyHostToDevice, g.streams[r]);
          for (int k = 0; k < K; ++k) g.comm->all_reduce_sum(r, dev[k]->t, g.streams[r]);
          for (int k = 0; k < K; ++k) {
            got[r].push_back(Tensor::empty(t, {sizes[k]}));
            cudaMemcpyAsync(got[r][k].data(), dev[k]->p, got[r][k].nbytes(), cudaMemcpyDeviceToHost, g.streams[r]);
          }
          EXPECT_EQ(cudaStreamSynchronize(g.streams[r]), cudaSuccess);
        });
        ASSERT_NO_THROW(g.comm->check());
        for (int r = 0; r < world; ++r)
          for (int k = 0; k < K; ++k)
            for (int64_t i = 0; i < sizes[k]; ++i)
              ASSERT_EQ(bits_at(got[r][k], i), bits_at(want[k][0], i)) << "rank " << r << ", tensor " << k << ", value " << i;
      }
}

// Parts of different widths side by side in rank order, on every rank or only on rank 0.
TEST_F(MailboxTest, GathersPutThePartsInRankOrder) {
  const int64_t widths[4] = {3, 130, 1, 77};
  for (MailboxPlace place : kOneGpuPlaces)
    for (int world = 1; world <= 4; ++world)
      for (DType t : {DType::F32, DType::F16})
        for (bool root_only : {false, true}) {
          SCOPED_TRACE(label(place, world, t) + (root_only ? ", root only" : ""));
          GpuRanks g(world, options(place));
          const int64_t rows = 5;
          int64_t cols = 0;
          std::vector<Tensor> parts;
          for (int r = 0; r < world; ++r) {
            parts.push_back(random_host(t, {rows, widths[r]}));
            cols += widths[r];
          }
          std::vector<Tensor> got(world);
          std::vector<std::unique_ptr<DevTensor>> dparts, douts;
          for (int r = 0; r < world; ++r) {
            dparts.push_back(std::make_unique<DevTensor>(parts[r]));
            douts.push_back(std::make_unique<DevTensor>(Tensor::empty(t, {rows, cols})));
          }
          g.run([&](int r) {
            DevTensor& part = *dparts[r];
            DevTensor& out = *douts[r];
            cudaMemcpyAsync(part.p, parts[r].data(), parts[r].nbytes(), cudaMemcpyHostToDevice, g.streams[r]);
            const bool wants = !root_only || r == 0;
            for (int rep = 0; rep < 3; ++rep)  // the same gather again: rounds reuse the slots
              g.comm->all_gather_cols(r, part.t, wants ? &out.t : nullptr, g.streams[r]);
            if (wants) {
              got[r] = Tensor::empty(t, {rows, cols});
              cudaMemcpyAsync(got[r].data(), out.p, got[r].nbytes(), cudaMemcpyDeviceToHost, g.streams[r]);
            }
            EXPECT_EQ(cudaStreamSynchronize(g.streams[r]), cudaSuccess);
          });
          ASSERT_NO_THROW(g.comm->check());
          for (int r = 0; r < world; ++r) {
            if (root_only && r != 0) continue;
            int64_t c0 = 0;
            for (int q = 0; q < world; ++q) {
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < widths[q]; ++j)
                  ASSERT_EQ(bits_at(got[r], i * cols + c0 + j), bits_at(parts[q], i * widths[q] + j))
                      << "rank " << r << " row " << i << ", part " << q << " column " << j;
              c0 += widths[q];
            }
          }
        }
}

// Each rank records [copy its input in, all-reduce, all-reduce of a second tensor] once as a CUDA
// graph and replays it with fresh inputs: the rounds are numbered on the device, so every replay
// must give the host communicator's bits.
TEST_F(MailboxTest, RecordedGraphsReplayTheirCollectives) {
  for (MailboxPlace place : kOneGpuPlaces)
    for (int world : {2, 3}) {
      SCOPED_TRACE(label(place, world, DType::F16));
      GpuRanks g(world, options(place, 8192));  // 4096 f16 values a round: 5120 takes two
      const int64_t n = 5120;
      std::vector<void*> pinned(world);
      for (auto& p : pinned) CK(cudaMallocHost(&p, n * 2));
      std::vector<std::unique_ptr<DevTensor>> x(world), y(world);
      std::vector<cudaGraphExec_t> exec(world);
      for (int r = 0; r < world; ++r) {
        x[r] = std::make_unique<DevTensor>(Tensor::empty(DType::F16, {n}));
        y[r] = std::make_unique<DevTensor>(Tensor::empty(DType::F16, {n}));
      }
      g.run([&](int r) {
        cudaStream_t s = g.streams[r];
        cudaGraph_t graph;
        ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        cudaMemcpyAsync(x[r]->p, pinned[r], n * 2, cudaMemcpyHostToDevice, s);
        cudaMemcpyAsync(y[r]->p, pinned[r], n * 2, cudaMemcpyHostToDevice, s);
        g.comm->all_reduce_sum(r, x[r]->t, s);
        g.comm->all_reduce_sum(r, x[r]->t, s);  // twice: a sum of sums
        g.comm->all_reduce_sum(r, y[r]->t, s);
        ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec[r], graph, 0), cudaSuccess);
        cudaGraphDestroy(graph);
      });
      for (int rep = 0; rep < 5; ++rep) {
        std::vector<Tensor> in;
        for (int r = 0; r < world; ++r) {
          in.push_back(random_host(DType::F16, {n}));
          std::memcpy(pinned[r], in[r].data(), n * 2);
        }
        const std::vector<Tensor> once = host_reduce(in);
        const std::vector<Tensor> twice = host_reduce(std::vector<Tensor>(world, once[0]));
        std::vector<Tensor> gx(world), gy(world);
        g.run([&](int r) {
          ASSERT_EQ(cudaGraphLaunch(exec[r], g.streams[r]), cudaSuccess);
          ASSERT_EQ(cudaStreamSynchronize(g.streams[r]), cudaSuccess);
          gx[r] = Tensor::empty(DType::F16, {n});
          gy[r] = Tensor::empty(DType::F16, {n});
          cudaMemcpy(gx[r].data(), x[r]->p, n * 2, cudaMemcpyDeviceToHost);
          cudaMemcpy(gy[r].data(), y[r]->p, n * 2, cudaMemcpyDeviceToHost);
        });
        ASSERT_NO_THROW(g.comm->check());
        for (int r = 0; r < world; ++r)
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(bits_at(gy[r], i), bits_at(once[0], i)) << "replay " << rep << " rank " << r << " value " << i;
            ASSERT_EQ(bits_at(gx[r], i), bits_at(twice[0], i)) << "replay " << rep << " rank " << r << " value " << i;
          }
      }
      for (auto& e : exec) cudaGraphExecDestroy(e);
      for (auto& p : pinned) cudaFreeHost(p);
    }
}

// Queues one collective per rank (fn picks the tensor), waits, and returns check()'s message
// ("" when it passes). With ranks on one GPU the host threads meet after each collective
// (MailboxOptions::pace_host), so a missing or aborted rank may surface there, from run.
std::string run_and_check(GpuRanks& g, const std::function<void(int, cudaStream_t)>& fn) {
  try {
    g.run([&](int r) {
      fn(r, g.streams[r]);
      EXPECT_EQ(cudaStreamSynchronize(g.streams[r]), cudaSuccess);
    });
    g.comm->check();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// After a failure the group works again once reset: one good all-reduce of 2 ranks.
void expect_good_round(GpuRanks& g) {
  g.comm->reset();
  Tensor h = random_host(DType::F32, {300});
  const std::vector<Tensor> want = host_reduce({h, h});
  std::vector<Tensor> got(2);
  const std::string err = run_and_check(g, [&](int r, cudaStream_t s) {
    Tensor x = g.view(r, 0, DType::F32, {300});
    cudaMemcpyAsync(x.data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice, s);
    g.comm->all_reduce_sum(r, x, s);
    got[r] = Tensor::empty(DType::F32, {300});
    cudaMemcpyAsync(got[r].data(), x.data(), h.nbytes(), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
  });
  EXPECT_EQ(err, "");
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 300; ++i) ASSERT_EQ(bits_at(got[r], i), bits_at(want[0], i));
}

TEST_F(MailboxTest, MismatchedTensorsAreNamed) {
  for (MailboxPlace place : kOneGpuPlaces) {
    SCOPED_TRACE(mailbox_place_name(place));
    GpuRanks g(2, options(place));
    std::string err = run_and_check(g, [&](int r, cudaStream_t s) {
      Tensor x = g.view(r, 0, DType::F32, {r == 0 ? 100 : 101});
      g.comm->all_reduce_sum(r, x, s);
      cudaStreamSynchronize(s);
    });
    EXPECT_TRUE(contains(err, "all_reduce_sum of 101 f32 values") && contains(err, "all_reduce_sum of 100 f32 values"))
        << err;
    expect_good_round(g);
    err = run_and_check(g, [&](int r, cudaStream_t s) {  // a reduce meets a gather
      Tensor x = g.view(r, 0, DType::F32, {2, 50});
      if (r == 0) g.comm->all_reduce_sum(r, x, s);
      else g.comm->all_gather_cols(r, x, nullptr, s);
      cudaStreamSynchronize(s);
    });
    EXPECT_TRUE(contains(err, "all_gather_cols of [2, 50] f32") && contains(err, "all_reduce_sum of 100 f32")) << err;
    expect_good_round(g);
    err = run_and_check(g, [&](int r, cudaStream_t s) {  // parts that do not fill the output
      Tensor x = g.view(r, 0, DType::F16, {3, 4});
      Tensor out = g.view(r, 1, DType::F16, {3, 9});
      g.comm->all_gather_cols(r, x, &out, s);
      cudaStreamSynchronize(s);
    });
    EXPECT_TRUE(contains(err, "in 9 columns, they make 8")) << err;
    expect_good_round(g);
  }
}

// Paced (the default on one GPU), the host barrier after the first collective times out; not
// paced, the kernel does on the GPU. Either way the late rank is named.
TEST_F(MailboxTest, ALateRankTimesOutByName) {
  for (MailboxPlace place : kOneGpuPlaces)
    for (int pace : {-1, 0}) {
      SCOPED_TRACE(fmt::format("{}, pace_host {}", mailbox_place_name(place), pace));
      GpuRanks g(2, options(place, size_t{1} << 20, milliseconds(300), pace));
      const auto t0 = Clock::now();
      const std::string err = run_and_check(g, [&](int r, cudaStream_t s) {
        if (r == 1) return;  // never comes
        Tensor x = g.view(r, 0, DType::F16, {64});
        for (int k = 0; k < 3; ++k) g.comm->all_reduce_sum(r, x, s);  // the later two leave at once
        cudaStreamSynchronize(s);
      });
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      EXPECT_TRUE(contains(err, "rank(s) 1 did not reach the collective within 300 ms")) << err;
      EXPECT_LT(secs, 5.0);
      expect_good_round(g);
    }
}

TEST_F(MailboxTest, AbortEndsTheWaitingCollectives) {
  for (MailboxPlace place : kOneGpuPlaces)
    for (int pace : {-1, 0}) {
      SCOPED_TRACE(fmt::format("{}, pace_host {}", mailbox_place_name(place), pace));
      GpuRanks g(2, options(place, size_t{1} << 20, kNoHang, pace));
      const auto t0 = Clock::now();
      std::thread aborter([&] {
        std::this_thread::sleep_for(milliseconds(100));
        g.comm->abort("rank 1 failed: out of memory");
      });
      const std::string err = run_and_check(g, [&](int r, cudaStream_t s) {
        if (r == 1) return;
        Tensor x = g.view(r, 0, DType::F32, {64});
        for (int k = 0; k < 3; ++k) g.comm->all_reduce_sum(r, x, s);
        cudaStreamSynchronize(s);
      });
      aborter.join();
      EXPECT_TRUE(contains(err, "rank 1 failed: out of memory")) << err;
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);  // not the minute's timeout
      expect_good_round(g);
    }
}

TEST_F(MailboxTest, Refusals) {
  EXPECT_THROW(make_mailbox_communicator({}, options(MailboxPlace::kHost)), Error);
  EXPECT_THROW(make_mailbox_communicator(std::vector<int>(9, 0), options(MailboxPlace::kHost)), Error);
  EXPECT_THROW(make_mailbox_communicator({0, device_count()}, options(MailboxPlace::kHost)), Error);
  EXPECT_THROW(make_mailbox_communicator({-1}, options(MailboxPlace::kHost)), Error);
  if (device_count() >= 2) {
    EXPECT_THROW(make_mailbox_communicator({0, 1}, options(MailboxPlace::kDevice)), Error);
  } else {  // peer access to itself: one GPU cannot be asked for it, and needs none
    EXPECT_NO_THROW(make_mailbox_communicator({0, 0}, options(MailboxPlace::kPeer)));
  }
  auto comm = make_mailbox_communicator({0, 0}, options(MailboxPlace::kDevice, 4096));
  Tensor host = Tensor::empty(DType::F32, {4});
  EXPECT_THROW(comm->all_reduce_sum(0, host, nullptr), Error);  // a host tensor
  DevTensor ints(Tensor::empty(DType::I32, {4}));
  EXPECT_THROW(comm->all_reduce_sum(0, ints.t, nullptr), Error);
  EXPECT_THROW(comm->all_reduce_sum(2, ints.t, nullptr), Error);
  DevTensor big(Tensor::empty(DType::F32, {2, 1025}));  // 8200 bytes: over the 4096-byte slot
  try {
    comm->all_gather_cols(0, big.t, nullptr, nullptr);
    ADD_FAILURE() << "a part over the slot was taken";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "exceeds the mailbox slot of 4096 bytes")) << e.what();
  }
}

}  // namespace
}  // namespace vi::parallel
