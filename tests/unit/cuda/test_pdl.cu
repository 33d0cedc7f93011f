// Programmatic dependent launch (backends/cuda/pdl.cuh) inside recorded graphs, replayed many
// times with fresh inputs:
//  - a chain of dependent kernels (slow producer, PDL consumer that reads what it wrote)
//    against the CPU's arithmetic, exact;
//  - a PDL kernel that overwrites a buffer the kernel before it still reads (write after read);
//  - the same chain with the consumer's pdl_wait() left out must see stale data at least once,
//    or the two tests above would pass without PDL doing anything (sm_90 with PDL on only);
//  - a decode-like chain of the converted ops (GEMV, swiglu_halves, add_rms_norm) recorded with
//    PDL against the same ops run one by one without it: bit-identical, and close to the CPU;
//  - decode attention behind a slow kernel that writes one key's K/V scales: the step's new key
//    is waited for in every replay, an older key (copied before the wait) is missed at least once.
// The producers spin for tens of microseconds before they touch memory, so a consumer that
// ran early would see the previous replay's values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/pdl.cuh"
#include "cuda_test_util.h"
#include "paged_pool_util.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/graph.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

constexpr int kThreads = 256;
constexpr long long kSpinCycles = 100000;  // ~50 us at H200 clocks: far longer than a launch

// out[i] = in[i] * mul + add after `spin` cycles. WAIT false breaks the PDL rule on purpose.
template <bool WAIT>
__global__ void step_kernel(const float* in, float* out, int n, float mul, float add, long long spin) {
  if (WAIT) cuda::pdl_wait();
  cuda::pdl_trigger();
  if (spin > 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * mul + add;
}

__global__ void fill_kernel(float* out, int n, float v) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = v;
}

// Stands in for the step's K/V write (qk_norm_rope_kv_write): after `spin` cycles it stores the
// n scales of one pool row of the i8 K and V pools (ks, vs at element off) from k_val, v_val.
__global__ void late_scale_kernel(float* ks, float* vs, const float* k_val, const float* v_val, int64_t off, int n,
                                  long long spin) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    ks[off + i] = k_val[i];
    vs[off + i] = v_val[i];
  }
}

class Pdl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    g.device = Device::CUDA;
    if (!ops::graphs_supported(g)) GTEST_SKIP() << "no CUDA graphs on this device";
  }
  void TearDown() override {
    if (cuda::device_count() > 0) cuda::set_pdl_allowed(true);
  }
  float* alloc(size_t n) {
    bufs_.push_back(ops::empty(g, DType::F32, {static_cast<int64_t>(n)}));
    return bufs_.back().ptr<float>();
  }
  static void put(float* dev, const std::vector<float>& h) {
    VI_CUDA_CHECK(cudaMemcpy(dev, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  static std::vector<float> get(const float* dev, size_t n) {
    std::vector<float> h(n);
    VI_CUDA_CHECK(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  // Replay r's input: exact small integers, different in every replay.
  static std::vector<float> input(int r, int n) {
    std::vector<float> h(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) h[i] = static_cast<float>(r * 1000 + i % 997);
    return h;
  }
  // slow +1, fast *2, slow +1, fast *2: ((x + 1) * 2 + 1) * 2, exact. Returns the number of
  // replays whose result differs from the CPU's anywhere.
  template <bool CONSUMER_WAITS>
  int chain_mismatches(int replays) {
    constexpr int n = 1 << 16;
    float *b0 = alloc(n), *b1 = alloc(n), *b2 = alloc(n), *b3 = alloc(n), *b4 = alloc(n);
    const unsigned grid = cuda::blocks_for(n, kThreads);
    auto graph = ops::record(g, [&](ops::Context& r) {
      const cudaStream_t s = cuda::stream_of(r);
      VI_CUDA_CHECK(cuda::pdl_launch(step_kernel<true>, grid, kThreads, 0, s, b0, b1, n, 1.0f, 1.0f, kSpinCycles));
      VI_CUDA_CHECK(cuda::pdl_launch(step_kernel<CONSUMER_WAITS>, grid, kThreads, 0, s, b1, b2, n, 2.0f, 0.0f, 0LL));
      VI_CUDA_CHECK(cuda::pdl_launch(step_kernel<true>, grid, kThreads, 0, s, b2, b3, n, 1.0f, 1.0f, kSpinCycles));
      VI_CUDA_CHECK(cuda::pdl_launch(step_kernel<CONSUMER_WAITS>, grid, kThreads, 0, s, b3, b4, n, 2.0f, 0.0f, 0LL));
    });
    int bad = 0;
    for (int r = 0; r < replays; ++r) {
      const std::vector<float> x = input(r, n);
      put(b0, x);
      graph->launch(g);
      const std::vector<float> y = get(b4, n);
      for (int i = 0; i < n; ++i)
        if (y[i] != ((x[i] + 1.0f) * 2.0f + 1.0f) * 2.0f) {
          ++bad;
          break;
        }
    }
    return bad;
  }

  ops::Context g;
  std::vector<Tensor> bufs_;
};

TEST_F(Pdl, DependentChainInGraphMatchesCpu) {
  EXPECT_EQ(chain_mismatches<true>(64), 0) << "replays with a wrong result (PDL " << cuda::pdl_enabled() << ")";
}

// The slow kernel reads X after its spin; the next one (PDL) overwrites X. Without the wait
// it would overwrite X while the slow kernel is still spinning, and Y would be -6.
TEST_F(Pdl, OverwriteOfABufferThePreviousKernelReads) {
  constexpr int n = 1 << 16;
  float *x = alloc(n), *y = alloc(n);
  const unsigned grid = cuda::blocks_for(n, kThreads);
  auto graph = ops::record(g, [&](ops::Context& r) {
    const cudaStream_t s = cuda::stream_of(r);
    VI_CUDA_CHECK(cuda::pdl_launch(step_kernel<true>, grid, kThreads, 0, s, x, y, n, 1.0f, 1.0f, kSpinCycles));
    VI_CUDA_CHECK(cuda::pdl_launch(fill_kernel, grid, kThreads, 0, s, x, n, -7.0f));
  });
  for (int r = 0; r < 64; ++r) {
    const std::vector<float> in = input(r, n);
    put(x, in);
    graph->launch(g);
    const std::vector<float> got_y = get(y, n), got_x = get(x, n);
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += got_y[i] != in[i] + 1.0f || got_x[i] != -7.0f;
    ASSERT_EQ(bad, 0) << "replay " << r << ": the overwrite reached the reader (PDL " << cuda::pdl_enabled() << ")";
  }
}

// The control: without pdl_wait() the consumer must overlap its producer and read stale data.
// If it never does, PDL is not in effect in graphs and the two tests above prove nothing.
TEST_F(Pdl, ConsumerWithoutWaitSeesStaleData) {
  if (!cuda::pdl_enabled())
    GTEST_SKIP() << "PDL is off here (needs compute capability 9.0, sm_90 code, CUDA 12.3, and VI_PDL not 0)";
  EXPECT_GT(chain_mismatches<false>(16), 0)
      << "a consumer without pdl_wait() never overlapped its producer: the attribute had no effect";
}

// Three decode-like layers of converted ops, recorded with PDL, against the same ops run one by
// one with PDL off (bit-identical: the kernels are deterministic) and against the CPU.
TEST_F(Pdl, RecordedOpChainMatchesOpByOpWithoutPdl) {
  constexpr int64_t K = 1024, F = 1536, kLayers = 3;
  const DType act = DType::F16;
  for (ops::KernelProfile prof : {ops::KernelProfile::kNative, ops::KernelProfile::kVolta}) {
    g.profile = prof;
    g.act = act;
    ops::Context cpu;
    std::vector<Tensor> w_up, w_down, w_norm, d_up, d_down, d_norm;
    for (int l = 0; l < kLayers; ++l) {
      w_up.push_back(host_as(rand_f32({2 * F, K}, act, -0.05f, 0.05f), act));
      w_down.push_back(host_as(rand_f32({K, F}, act, -0.05f, 0.05f), act));
      w_norm.push_back(rand_f32({K}, DType::F32, 0.5f, 1.5f));
      d_up.push_back(ops::prepare_matmul_weight(g, ops::upload(g, w_up.back())));
      d_down.push_back(ops::prepare_matmul_weight(g, ops::upload(g, w_down.back())));
      d_norm.push_back(ops::upload(g, w_norm.back()));
    }
    Tensor h = ops::empty(g, act, {1, K}), xn = ops::empty(g, act, {1, K});
    Tensor gu = ops::empty(g, act, {1, 2 * F}), s = ops::empty(g, act, {1, F}), o = ops::empty(g, act, {1, K});
    // h and xn hold the residual stream and its norm; each layer: xn -> up -> swiglu -> down
    // -> h += o, xn = rms_norm(h).
    auto layers = [&](ops::Context& c, Tensor& h_, Tensor& xn_, Tensor& gu_, Tensor& s_, Tensor& o_,
                      const std::vector<Tensor>& up, const std::vector<Tensor>& down, const std::vector<Tensor>& nw) {
      for (int l = 0; l < kLayers; ++l) {
        ops::matmul(c, xn_, up[l], gu_);
        ops::swiglu_halves(c, gu_, s_);
        ops::matmul(c, s_, down[l], o_);
        ops::add_rms_norm(c, h_, o_, nw[l], 1e-6f, 0.0f, xn_);
      }
    };
    auto graph = ops::record(g, [&](ops::Context& r) { layers(r, h, xn, gu, s, o, d_up, d_down, d_norm); });
    for (int rep = 0; rep < 8; ++rep) {
      const Tensor h0 = rand_f32({1, K}, act), x0 = rand_f32({1, K}, act);
      auto load = [&] {
        Tensor dh = to_gpu(g, h0, act), dx = to_gpu(g, x0, act);
        ops::copy(g, dh, h);
        ops::copy(g, dx, xn);
        ops::synchronize(g);
      };
      load();
      cuda::set_pdl_allowed(false);
      layers(g, h, xn, gu, s, o, d_up, d_down, d_norm);
      cuda::set_pdl_allowed(true);
      const Tensor ref_h = to_host_f32(g, h), ref_x = to_host_f32(g, xn);
      load();
      graph->launch(g);
      const Tensor got_h = to_host_f32(g, h), got_x = to_host_f32(g, xn);
      const std::string what = fmt::format("{} replay {}", cuda::profile_name(prof), rep);
      EXPECT_EQ(rel_l2(got_h, ref_h), 0.0) << what << ": residual, recorded with PDL vs op by op without";
      EXPECT_EQ(rel_l2(got_x, ref_x), 0.0) << what << ": norm, recorded with PDL vs op by op without";
      if (rep == 0) {  // and the CPU, once per profile
        auto clone = [](const Tensor& t) {
          Tensor c = Tensor::empty(t.dtype(), t.shape());
          std::memcpy(c.data(), t.data(), t.nbytes());
          return c;
        };
        Tensor ch = clone(h0), cx = clone(x0), cgu = Tensor::empty(DType::F32, {1, 2 * F});
        Tensor cs = Tensor::empty(DType::F32, {1, F}), co = Tensor::empty(DType::F32, {1, K});
        layers(cpu, ch, cx, cgu, cs, co, w_up, w_down, w_norm);
        EXPECT_CLOSE(got_x, cx, 2e-2, what + ": norm vs the CPU");
      }
    }
  }
}

// Decode attention starts copying the slots of keys before the step's first new token before its
// pdl_wait (DecodeTuning::pre_wait_copies: those rows are written in earlier steps). Recorded behind
// late_scale_kernel, which writes one key's scales (NaN until then) ~50 us after it starts, for a
// decode round (T = 1, the one-tile kernel) and a verify round (T = 4, the shared-slot kernel): with
// the first new token's key, every replay must equal the CPU's output (its slot was waited for); with an older
// key, which that contract lets the kernel read early, at least one replay must miss the write, or
// the first check would pass without any copy running before the wait.
TEST_F(Pdl, DecodeAttentionWaitsForTheNewKeyOnly) {
  if (!cuda::pdl_enabled())
    GTEST_SKIP() << "PDL is off here (needs compute capability 9.0, sm_90 code, CUDA 12.3, and VI_PDL not 0)";
  if (!cuda::decode_tuning().pre_wait_copies) GTEST_SKIP() << "pre-wait copies are off (VI_DECODE_PRE_WAIT=0)";
  g.profile = ops::KernelProfile::kNative;
  g.act = DType::F16;
  ops::Context cpu;
  const Shape s{24, 4, 256, 16};  // the 27B model's attention; a recorded step's key bound
  const int64_t S = 8200, bound = 16384, n_blocks = bound / s.bs + 1, n_rows = n_blocks * s.bs;
  const Tensor table = shuffled_table(n_blocks);
  Pool k = make_paged_pool(cpu, g, DType::I8, true, s, n_rows, table, S);
  Pool v = make_paged_pool(cpu, g, DType::I8, false, s, n_rows, table, S);
  Tensor dtable = ops::upload(g, table);
  // T = 1: the one-tile kernel (a decode round); T = 4: the shared-slot kernel (a verify round).
  for (int64_t T : {1, 4}) {
    const int64_t p0 = S - T;  // the step's first new token
    const Tensor q = rand_f32({T, s.Hq, s.D}, DType::F16, -2.0f, 2.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    Tensor ref = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    ops::paged_attention(cpu, q, k.host, v.host, table, s.bs, p0, scale, ref);
    Tensor pos = Tensor::empty(DType::I32, {1});
    pos.ptr<int32_t>()[0] = static_cast<int32_t>(p0);
    Tensor dq = to_gpu(g, q, DType::F16), dpos = ops::upload(g, pos);
    Tensor dout = ops::empty(g, DType::F16, {T, s.Hq, s.D});
    const cuda::DecodeArgs a =
        decode_args(s, T, DType::F16, dq.data(), k, v, dtable, dpos, bound, scale, dout.data());
    if (!cuda::decode_tc_warps_fits(g, a) || !cuda::decode_tc_takes(g, a))
      GTEST_SKIP() << "the warp-split decode kernels do not take this call here (no sm_80 code)";
    // Replays (of `replays`) whose output is not the CPU's, key_pos's scales NaN before each.
    auto stale_replays = [&](int64_t key_pos, int replays) {
      const int64_t row = int64_t(table.ptr<int32_t>()[key_pos / s.bs]) * s.bs + key_pos % s.bs;
      auto scales_of = [&](const Pool& p) {  // the row's true scales, on the device
        Tensor h = Tensor::empty(DType::F32, {s.Hkv});
        std::memcpy(h.data(), p.host.scale.ptr<float>() + row * s.Hkv, s.Hkv * sizeof(float));
        return ops::upload(g, h);
      };
      Tensor dk_row = scales_of(k), dv_row = scales_of(v);
      float* ks = k.dev.scale.ptr<float>() + row * s.Hkv;
      float* vs = v.dev.scale.ptr<float>() + row * s.Hkv;
      auto graph = ops::record(g, [&](ops::Context& r) {
        VI_CUDA_CHECK(cuda::pdl_launch(late_scale_kernel, 1, 32, 0, cuda::stream_of(r), k.dev.scale.ptr<float>(),
                                       v.dev.scale.ptr<float>(), dk_row.ptr<float>(), dv_row.ptr<float>(),
                                       row * s.Hkv, static_cast<int>(s.Hkv), kSpinCycles));
        cuda::decode_attention(r, a);
      });
      const std::vector<float> nan(static_cast<size_t>(s.Hkv), std::numeric_limits<float>::quiet_NaN());
      int bad = 0;
      for (int rep = 0; rep < replays; ++rep) {
        put(ks, nan);
        put(vs, nan);
        graph->launch(g);
        const double err = rel_l2(to_host_f32(g, dout), ref);
        if (!(err < 3e-3)) ++bad;
      }
      put(ks, std::vector<float>(k.host.scale.ptr<float>() + row * s.Hkv, k.host.scale.ptr<float>() + (row + 1) * s.Hkv));
      put(vs, std::vector<float>(v.host.scale.ptr<float>() + row * s.Hkv, v.host.scale.ptr<float>() + (row + 1) * s.Hkv));
      return bad;
    };
    EXPECT_EQ(stale_replays(p0, 16), 0) << "T " << T << ": the new token's K/V were read before the kernel writing "
                                           "them finished";
    EXPECT_GT(stale_replays(p0 - 40, 16), 0)
        << "T " << T << ": no slot was copied before pdl_wait: the pre-wait copies never overlapped the kernel before";
  }
}

}  // namespace
}  // namespace vi::cudatest
