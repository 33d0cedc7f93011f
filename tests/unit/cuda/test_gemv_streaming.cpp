// The streaming shapes of the Q4_KT decode GEMV (Q4ktShape::stream, gemv_q4kt.cu): a grid of SMs x
// blocks whose blocks take several tiles, each next tile's first loads issued before the current
// tile's sums meet. On matrices of more tiles than one wave (19200 rows: 1200 tiles, more than
// 4 blocks on each of up to 299 SMs) every kernel the model reaches must stream (the launch
// counter says so) and give the one-tile kernel's outputs bit for bit: the plain GEMV, its split
// form, the fused gate|up + SwiGLU on Q4_KT and Q4_KTS, and the deferred norm's three consumers
// (the mins' term from the producer's sums, and without them). The plain GEMV and the SwiGLU are
// also checked against the CPU on the Q4_K original, so two kernels wrong the same way fail too.
// With tickets switched on (the items past each block's second handed out by a counter), every
// streaming launch of more than two tiles a block draws tickets (counted) and gives the same bits,
// twice in a row (the counter is back at zero after each launch, or the second would skip items
// and leave NaN); a launch of one to two waves (a matrix made for this device's SM count) draws
// none and gives the same bits too. Off the native f16 path the test says why it skips. The
// policies (T = 1 streams by default; tickets are on unless switched off) are checked without a
// GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/hwinfo.h"
#include "cuda_test_util.h"
#include "ops/deferred_norm.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

class GemvStreamingGpu : public CudaOpTest {
 protected:
  static constexpr int64_t kN = 19200, kF = kN / 2, kK = 1024, kD = 1024;  // kD: the producer's width
  static constexpr float kEps = 1e-6f, kOff = 1.0f;

  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
      GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
    w = rand_weight(DType::Q4_K, kN, kK, 0.5f);
    dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
    if (const std::string why = no_tiled_q4k_reason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(dw.dtype(), DType::Q4_KT) << "sm_80+ code and tiles on: the Q4_K weight must be prepared as Q4_KT";
    dws = ops::prepare_matmul_weight(g, ops::upload(g, w), {kF, kF}, ops::MatmulInput::kNorm,
                                     ops::MatmulUse::kSwiglu);
    ASSERT_EQ(dws.dtype(), DType::Q4_KTS);
  }
  void TearDown() override {
    cuda::set_q4kt_stream_default(-1);
    cuda::set_q4kt_tickets_default(-1);
    ops::set_deferred_norm_allowed(-1);
  }

  // Streaming forced on, with tickets (on = 1) or the fixed stride (0).
  static void stream_mode(int tickets) {
    cuda::set_q4kt_stream_default(1);
    cuda::set_q4kt_tickets_default(tickets);
  }

  // f(shape) with the output poisoned first, for the one-tile and the streaming form of `base`,
  // then streaming with tickets twice; every result must be the one-tile form's bits, each
  // streaming launch counted, and each launch with tickets counted where its `items` (tiles, or
  // the SwiGLU's pairs of half tiles) are more than two a block.
  template <class F>
  Tensor both_same(cuda::Q4ktShape base, const std::vector<int64_t>& out_shape, F f, const std::string& what,
                   int64_t items = kN / 16) {
    const bool draws = items > 2 * int64_t(cuda::gpu_facts(0).sm_count) * base.blocks;
    Tensor a = up(nan_f32(out_shape));
    base.stream = false;
    f(base, a);
    const Tensor ha = down(a);
    base.stream = true;
    for (int run = 0; run < 3; ++run) {
      const int tickets = run > 0 ? 1 : 0;
      cuda::set_q4kt_tickets_default(tickets);
      Tensor b = up(nan_f32(out_shape));
      const uint64_t before = cuda::gemv_q4kt_streaming_launches(), drew = cuda::gemv_q4kt_ticket_launches();
      f(base, b);
      const std::string at = fmt::format("{} {}{}", what, cuda::gemv_q4kt_shape_name(base),
                                         tickets ? fmt::format(", tickets (launch {})", run) : "");
      EXPECT_EQ(cuda::gemv_q4kt_streaming_launches(), before + 1) << at << ": the streaming kernel was not launched";
      EXPECT_EQ(cuda::gemv_q4kt_ticket_launches(), drew + (draws ? tickets : 0)) << at;
      EXPECT_EQ(words_differ(down(b), ha), "") << at;
    }
    cuda::set_q4kt_tickets_default(-1);
    return ha;
  }

  Tensor w, dw, dws;
};

TEST_P(GemvStreamingGpu, PlainSplitAndSwigluEqualTheOneTileKernels) {
  for (int64_t T : {1, 4, 8}) {
    const Tensor x = rand_f32({T, kK}, act(), -2.0f, 2.0f);
    const Tensor dx = up(x);
    Tensor ref = Tensor::empty(DType::F32, {T, kN});
    ops::matmul(cpu, x, w, ref);
    Tensor h_ref = Tensor::empty(DType::F32, {T, kF});
    ops::swiglu_halves(cpu, ref, h_ref);
    for (const cuda::Q4ktShape shape : cuda::gemv_q4kt_shapes()) {
      if (shape.stream) continue;  // each base shape once; both_same runs both forms
      const std::string at = fmt::format("T={}", T);
      const Tensor y = both_same(shape, {T, kN}, [&](cuda::Q4ktShape s, Tensor& out) {
        cuda::gemv_q4kt(g, dx, dw, out, s);
      }, "gemv " + at);
      EXPECT_CLOSE(y, ref, 4e-3, "gemv " + at);
      const Tensor h = both_same(shape, {T, kF}, [&](cuda::Q4ktShape s, Tensor& out) {
        cuda::gemv_q4kt_swiglu(g, dx, dw, out, s);
      }, "swiglu on Q4_KT " + at);
      EXPECT_CLOSE(h, h_ref, 4e-3, "swiglu " + at);
      const Tensor hs = both_same(shape, {T, kF}, [&](cuda::Q4ktShape s, Tensor& out) {
        cuda::gemv_q4kt_swiglu(g, dx, dws, out, s);
      }, "swiglu on Q4_KTS " + at);
      EXPECT_EQ(words_differ(hs, h), "") << "Q4_KTS against Q4_KT, " << at;
    }
    // The split form (default shape): streaming off, on, on with tickets.
    const std::vector<int64_t> widths = {kN - 3200, 3200};
    std::vector<Tensor> got[3];
    for (int mode = 0; mode < 3; ++mode) {
      if (mode == 0)
        cuda::set_q4kt_stream_default(0);
      else
        stream_mode(mode - 1);
      std::vector<Tensor> parts;
      for (int64_t wd : widths) parts.push_back(up(nan_f32({T, wd})));
      std::vector<Tensor*> ptrs = {&parts[0], &parts[1]};
      const uint64_t before = cuda::gemv_q4kt_streaming_launches();
      ASSERT_TRUE(cuda::gemv_q4kt_split_supports(g, dx, dw, ptrs));
      cuda::gemv_q4kt_split(g, dx, dw, ptrs);
      EXPECT_EQ(cuda::gemv_q4kt_streaming_launches(), before + (mode > 0 ? 1 : 0)) << "split T=" << T;
      for (Tensor& p : parts) got[mode].push_back(down(p));
    }
    for (int mode = 1; mode < 3; ++mode)
      for (size_t p = 0; p < widths.size(); ++p)
        EXPECT_EQ(words_differ(got[mode][p], got[0][p]), "") << "split part " << p << " mode " << mode;
    cuda::set_q4kt_tickets_default(-1);
  }
}

// Between one and two waves of tiles (1.5 a slot at either block count): streaming without tickets
// whether or not they are on, against the one-tile kernel bit for bit, and the CPU.
TEST_P(GemvStreamingGpu, OneToTwoWavesDrawNoTickets) {
  const int64_t sms = cuda::gpu_facts(0).sm_count;
  for (int blocks : {3, 4}) {
    const int64_t n = 16 * (3 * sms * blocks / 2);
    const Tensor w1 = rand_weight(DType::Q4_K, n, kK, 0.5f);
    const Tensor dw1 = ops::prepare_matmul_weight(g, ops::upload(g, w1));
    ASSERT_EQ(dw1.dtype(), DType::Q4_KT);
    for (int64_t T : {1, 4}) {
      const Tensor x = rand_f32({T, kK}, act(), -2.0f, 2.0f);
      const Tensor dx = up(x);
      Tensor ref = Tensor::empty(DType::F32, {T, n});
      ops::matmul(cpu, x, w1, ref);
      const Tensor y = both_same(cuda::Q4ktShape{blocks, false, false}, {T, n}, [&](cuda::Q4ktShape s, Tensor& out) {
        cuda::gemv_q4kt(g, dx, dw1, out, s);
      }, fmt::format("gemv {} rows, T={}", n, T), n / 16);
      EXPECT_CLOSE(y, ref, 4e-3, fmt::format("gemv {} rows, T={}", n, T));
    }
  }
}

// The deferred norm's consumers through the ops, as the model calls them: a producer of width kD,
// then matmul, matmul_split and the fused SwiGLU on its u, with streaming off, on, and on with
// tickets.
TEST_P(GemvStreamingGpu, DeferredConsumersEqualTheOneTileKernels) {
  ops::set_deferred_norm_allowed(1);
  const Tensor wp = rand_weight(DType::Q4_K, kD, kK, 0.5f);
  const Tensor dwp = ops::prepare_matmul_weight(g, ops::upload(g, wp));
  const Tensor dnw = ops::upload(g, rand_f32({kD}, DType::F32, -0.5f, 0.5f));
  // The consumers read width kD: weights [kN, kD] (kK == kD keeps the ones above).
  static_assert(kK == kD, "the consumers' weights are the ones made in SetUp");
  if (!ops::deferred_norm_fused(g, dwp, dws, ops::DeferredConsumer::kSwiglu, 1) ||
      !ops::deferred_norm_fused(g, dwp, dw, ops::DeferredConsumer::kMatmul, 1))
    GTEST_SKIP() << "this device does not fuse the deferred norm on Q4_KT";
  for (const char* sums : {"1", "0"}) {
    for (int64_t T : {1, 4, 8}) {
      const Tensor a = rand_f32({T, kK}, act(), -1.0f, 1.0f), x0 = rand_f32({T, kD}, act(), -4.0f, 4.0f);
      Tensor y[3], h[3], split[3][2];
      bool sums_written[3] = {false, false, false};
      for (int mode = 0; mode < 3; ++mode) {
        const int on = mode > 0 ? 1 : 0;
        if (mode == 0)
          cuda::set_q4kt_stream_default(0);
        else
          stream_mode(mode - 1);
        ops::DeferredNorm in = ops::deferred_norm_scratch(g, T, kD, kEps);
        if (std::strcmp(sums, "0") == 0) in.sums16 = Tensor();  // no sums: the consumers run the mins' mmas
        Tensor dx = up(x0);
        ops::matmul_add_deferred_norm(g, up(a), dwp, dx, dnw, kOff, in);
        sums_written[mode] = in.sums_written;
        Tensor dy = up(nan_f32({T, kN})), dall = up(nan_f32({T, kN})), dh = up(nan_f32({T, kF}));
        Tensor gu = up(nan_f32({T, kN}));
        Tensor p0 = up(nan_f32({T, kN - 3200})), p1 = up(nan_f32({T, 3200}));
        const uint64_t before = cuda::gemv_q4kt_streaming_launches();
        ops::matmul_deferred(g, in, dw, dy);
        ops::matmul_split_deferred(g, in, dw, dall, {&p0, &p1});
        ops::matmul_swiglu_deferred(g, in, dws, gu, dh);
        EXPECT_EQ(cuda::gemv_q4kt_streaming_launches(), before + 3 * on) << "T=" << T << " sums " << sums;
        y[mode] = down(dy);
        h[mode] = down(dh);
        split[mode][0] = down(p0);
        split[mode][1] = down(p1);
      }
      cuda::set_q4kt_tickets_default(-1);
      for (int mode = 1; mode < 3; ++mode) {
        const std::string at =
            fmt::format("T={} sums {} (written: {}), mode {}", T, sums, sums_written[0], mode);
        EXPECT_EQ(sums_written[0], sums_written[mode]) << at;
        if (std::strcmp(sums, "0") == 0) {
          EXPECT_FALSE(sums_written[mode]) << at;
        }
        EXPECT_EQ(words_differ(y[mode], y[0]), "") << "matmul_deferred, " << at;
        for (int p = 0; p < 2; ++p)
          EXPECT_EQ(words_differ(split[mode][p], split[0][p]), "") << "matmul_split_deferred part " << p << ", " << at;
        EXPECT_EQ(words_differ(h[mode], h[0]), "") << "matmul_swiglu_deferred, " << at;
      }
    }
  }
}

// The default: streaming for one token only (the 4-token round measured slower streamed), each
// way forced by the switch; the model's calls follow it.
TEST(GemvStreamingPolicy, OneTokenByDefaultForcedEitherWay) {
  if (std::getenv("VI_Q4KT_STREAM") == nullptr) {
    EXPECT_TRUE(cuda::gemv_q4kt_stream_default(1));
    EXPECT_FALSE(cuda::gemv_q4kt_stream_default(4));
    EXPECT_TRUE(cuda::gemv_q4kt_default_shape(34816, 1).stream);
    EXPECT_FALSE(cuda::gemv_q4kt_swiglu_default_shape(34816, 8).stream);
  }
  cuda::set_q4kt_stream_default(1);
  EXPECT_TRUE(cuda::gemv_q4kt_stream_default(8));
  cuda::set_q4kt_stream_default(0);
  EXPECT_FALSE(cuda::gemv_q4kt_stream_default(1));
  cuda::set_q4kt_stream_default(-1);
}

// Tickets are on unless switched off, and the switch works both ways.
TEST(GemvStreamingPolicy, TicketsOnUnlessSwitchedOff) {
  if (std::getenv("VI_Q4KT_TICKETS") == nullptr) {
    EXPECT_TRUE(cuda::gemv_q4kt_tickets_default());
  }
  cuda::set_q4kt_tickets_default(1);
  EXPECT_TRUE(cuda::gemv_q4kt_tickets_default());
  cuda::set_q4kt_tickets_default(0);
  EXPECT_FALSE(cuda::gemv_q4kt_tickets_default());
  cuda::set_q4kt_tickets_default(-1);
}

VI_CUDA_INSTANTIATE(GemvStreamingGpu);

}  // namespace
}  // namespace vi::cudatest
