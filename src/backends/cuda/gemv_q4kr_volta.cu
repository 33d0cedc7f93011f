// Volta tensor-core decode GEMV on Q4_KR weights: see gemv_q4kr_volta.cuh for the plan and the
// numerics, docs/notes/gemv.md ("Volta: m8n8k4 on Q4_KR") for the counts behind it.
#include <type_traits>

#include "backends/cuda/gemv_q4kr_volta.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"

namespace vi::cuda {
namespace {

// The activation sums take K·T/8 bytes of shared memory: 24 KB at K = 24576, T = 8, which with
// 16 KB of warp sums (4 tiles) stays under the 48 KB a block gets without an opt-in.
constexpr int64_t kMaxK = 24576;

// D (8 x 8 per quad pair, fp32) += A (8 x 4, f16) · B (4 x 8, f16), mma.m8n8k4 row.col. Lane L
// is thread t = L % 4 + 4·(L / 16) of quad pair L / 4 % 4 (lanes 4q..4q+3 and 4q+16..4q+19):
// a = A[t][0..3] (a0: k 0, 1; a1: k 2, 3), b = B[0..3][t] (same packing), d[i] = D[m][n] with
// m = (L & 1) + 2·(i >> 1 & 1) + 4·(L >> 4 & 1), n = (i & 1) + (L & 2) + 4·(i >> 2) (PTX ISA,
// "Matrix fragments for mma.m8n8k4 with .f16", f32 accumulators). Four HMMA.884 on sm_70-75;
// sm_80 and newer run it as a subroutine on the CUDA cores (correct, slow).
__device__ __forceinline__ void mma_884(float d[8], uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}
// d = A · B from zero (no zeroed accumulators to set first).
__device__ __forceinline__ void mma_884_z(float d[8], uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%12,%12,%12,%12,%12,%12,%12,%12};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1), "f"(0.0f));
}

// One row's half super-block as a thread uses it: sub-blocks 4h .. 4h + 3 (16 bytes each).
struct Half {
  uint4 q[4];
};
// A super-block's 16 scale and min bytes of the thread's own row (.x, .y: sc[0..3], m[0..3];
// .z, .w: sc[4..7], m[4..7]), and (d, dmin) of the two rows its accumulators hold.
struct Scales {
  uint4 sm;
  uint32_t dd[2];
};

__device__ __forceinline__ void load_half(const uint8_t* q, Half& h) {
#pragma unroll
  for (int j = 0; j < 4; ++j) h.q[j] = __ldcs(reinterpret_cast<const uint4*>(q + 16 * j));
}
__device__ __forceinline__ void load_scales(const uint8_t* sm, const uint8_t* dm0, const uint8_t* dm1, Scales& s) {
  s.sm = __ldcs(reinterpret_cast<const uint4*>(sm));
  s.dd[0] = __ldg(reinterpret_cast<const uint32_t*>(dm0));
  s.dd[1] = __ldg(reinterpret_cast<const uint32_t*>(dm1));
}

// t[0], t[1] (+)= Σ sc·q·x and u (+)= Σ m·S over one half super-block of the thread's row and
// its token column. FIRST: the super-block's first half (accumulators start from zero).
//   scw / mnw: the half's 4 scale / 4 min bytes of the thread's row;
//   xh: the token's 128 activations of the half; xs: the half's two activation-sum pairs
//   (sub-blocks 0-1, then 2-3 of the half at xs[n_tok]), each (hi, hi | lo, lo) of S/32.
// Two accumulator sets take the two mmas of each word, so consecutive mmas do not wait on
// each other's results.
template <bool FIRST>
__device__ __forceinline__ void mma_half(const Half& h, uint32_t scw, uint32_t mnw, const __half* xh, const uint2* xs,
                                         int n_tok, uint32_t magic, float t[2][8], float u[8]) {
  const __half2 k1024 = __float2half2_rn(1024.0f), kNeg1024 = __float2half2_rn(-1024.0f);
  const __half2 kSixteenth = __float2half2_rn(0.0625f), kNeg64 = __float2half2_rn(-64.0f);
  const __half2 k32 = __float2half2_rn(32.0f), kNeg32768 = __float2half2_rn(-32768.0f);
#pragma unroll
  for (int jp = 0; jp < 2; ++jp) {
    // Sub-blocks 2jp, 2jp + 1 of the half: bytes 2jp, 2jp + 1 under 0x64 are 1024 + byte.
    const uint32_t sel = jp == 0 ? 0x4140u : 0x4342u;
    const __half2 sc2 = __hsub2(as_h2(__byte_perm(scw, 0x64u, sel)), k1024);
    const __half2 neg2 = __hmul2(sc2, kNeg1024);   // −1024·sc: exact (<= 64512)
    const __half2 s16_2 = __hmul2(sc2, kSixteenth);  // sc/16 for the 1024 + 16q pairs: exact
    const __half2 n16_2 = __hmul2(sc2, kNeg64);     // −64·sc
    const uint32_t m32 = as_u32(__hfma2(as_h2(__byte_perm(mnw, 0x64u, sel)), k32, kNeg32768));  // 32·m: exact
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * jp + jj;
      const __half2 sc = jj == 0 ? __low2half2(sc2) : __high2half2(sc2);
      const __half2 neg = jj == 0 ? __low2half2(neg2) : __high2half2(neg2);
      const __half2 s16 = jj == 0 ? __low2half2(s16_2) : __high2half2(s16_2);
      const __half2 n16 = jj == 0 ? __low2half2(n16_2) : __high2half2(n16_2);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // Values 8i .. 8i+7 of sub-block j: pairs (0,1), (2,3) meet activations 0..3 (xv.x, .y)
        // in one mma, (4,5), (6,7) meet 4..7 (.z, .w) in the next.
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(xh + 32 * j + 8 * i));
        const uint32_t wd = word(h.q[j], i), w8 = wd >> 8;
        const uint32_t a0 = as_u32(__hfma2(as_h2(and_or<0x000F000Fu>(wd, magic)), sc, neg));
        const uint32_t a1 = as_u32(__hfma2(as_h2(and_or<0x00F000F0u>(wd, magic)), s16, n16));
        const uint32_t a2 = as_u32(__hfma2(as_h2(and_or<0x000F000Fu>(w8, magic)), sc, neg));
        const uint32_t a3 = as_u32(__hfma2(as_h2(and_or<0x00F000F0u>(w8, magic)), s16, n16));
        if (FIRST && j == 0 && i == 0) {
          mma_884_z(t[0], a0, a1, xv.x, xv.y);
          mma_884_z(t[1], a2, a3, xv.z, xv.w);
        } else {
          mma_884(t[0], a0, a1, xv.x, xv.y);
          mma_884(t[1], a2, a3, xv.z, xv.w);
        }
      }
    }
    // The two sub-blocks' mins: k = (2jp, 2jp + 1, 2jp, 2jp + 1) with A = 32·m, B = S/32 hi, lo.
    const uint2 sv = xs[jp * n_tok];
    if (FIRST && jp == 0) mma_884_z(u, m32, m32, sv.x, sv.y);
    else mma_884(u, m32, m32, sv.x, sv.y);
  }
}

// acc += d·t − dmin·u for the thread's accumulators: i & 2 selects the second of its rows.
__device__ __forceinline__ void apply_scales(const uint32_t dd[2], const float t[2][8], const float u[8], float acc[8]) {
  const float2 dm0 = __half22float2(as_h2(dd[0])), dm1 = __half22float2(as_h2(dd[1]));
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 dm = (i & 2) ? dm1 : dm0;
    acc[i] = fmaf(dm.x, t[0][i] + t[1][i], fmaf(-dm.y, u[i], acc[i]));
  }
}

// A block of TILES x 4 warps owns TILES tiles of 32 rows; the 4 warps of a tile take
// super-blocks w, w + 4, ... — always position w of a Q4_KR block, so the next one is one block
// on (a pointer increment and immediate offsets). Half 1 of a super-block loads while half 0
// multiplies, the next half 0 and scales while half 1 does; the first half 0 is in flight
// while the block sums the activations (and, under PDL, while the previous kernel ends). Rows
// past N read row N − 1 and tokens past T token T − 1 (mma columns never stored), so every load
// is in bounds without a test per step.
template <int TILES, int MINB>
__global__ void __launch_bounds__(128 * TILES, MINB)
    gemv_q4kr_volta_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                           __half* __restrict__ y, int n_tok, int64_t N, int n_sb, int64_t K, uint32_t magic) {
  // Activation sums: pair P (sub-blocks 2P, 2P + 1 of a row) of token t at [P · n_tok + t] as
  // halves (hi_2P, hi_2P+1, lo_2P, lo_2P+1) of S/32 (S/32 cannot overflow f16; 32·m is exact).
  extern __shared__ uint2 xsum[];
  __shared__ float red[4 * TILES][8][32];
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, tile = threadIdx.x >> 7;
  const int qp = (lane >> 2) & 3, pos = (lane & 3) | ((lane >> 2) & 4);  // quad pair, place in it
  const int64_t n0 = (int64_t(blockIdx.x) * TILES + tile) * 32;
  // The thread's A row (quants, scales and mins) and the two rows of its accumulators.
  const int64_t ra = min(n0 + 8 * qp + pos, N - 1);
  const int rc = 8 * qp + (lane & 1) + ((lane >> 2) & 4);
  const int64_t rc0 = min(n0 + rc, N - 1), rc1 = min(n0 + rc + 2, N - 1);
  // Super-block `warp` of the row: position `warp` of its first Q4_KR block.
  const uint8_t* q = w + static_cast<size_t>(ra) * row_bytes + 128 * warp;
  const uint8_t* sm = w + static_cast<size_t>(ra) * row_bytes + kQ4krSmOff + 16 * warp;
  const uint8_t* dm0 = w + static_cast<size_t>(rc0) * row_bytes + kQ4krDmOff + 4 * warp;
  const uint8_t* dm1 = w + static_cast<size_t>(rc1) * row_bytes + kQ4krDmOff + 4 * warp;
  const int tok = min(pos, n_tok - 1);
  const __half* xh = x + static_cast<int64_t>(tok) * K + 256 * warp;
  const uint2* xs = xsum + 4 * warp * n_tok + tok;

  Half h0, h1;
  Scales sc, sc_next;
  if (warp < n_sb) {
    load_half(q, h0);
    load_scales(sm, dm0, dm1, sc);
  }
  // The weights are no kernel's output, so their first loads go out before the wait (pdl.cuh);
  // x and y only after it.
  pdl_wait();
  pdl_trigger();

  // S_j / 32 of every 32-value sub-block j and token, in fp32, then split into hi + lo f16.
  // Task (t, j) per thread, tasks tid, tid + threads, ...; four at a time, so that their loads
  // (L2 hits mostly: x was just written) are in flight together.
  {
    constexpr int kThreads = 128 * TILES, kBatch = 4;
    const int n_sub = static_cast<int>(K / 32), n_tasks = n_tok * n_sub;
    const int dt = kThreads / n_sub, dj = kThreads - dt * n_sub;  // one stride of tasks in (t, j)
    int t = static_cast<int>(threadIdx.x) / n_sub, j = static_cast<int>(threadIdx.x) - t * n_sub;
    __half* xsh = reinterpret_cast<__half*>(xsum);
    for (int task = threadIdx.x; task < n_tasks; task += kBatch * kThreads) {
      uint4 v[kBatch][4];
      int tb[kBatch], jb[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        tb[b] = t;
        jb[b] = j;
        if (task + b * kThreads < n_tasks) {
          const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * K + 32 * j);
#pragma unroll
          for (int i = 0; i < 4; ++i) v[b][i] = __ldg(src + i);
        }
        j += dj;
        t += dt;
        if (j >= n_sub) {
          j -= n_sub;
          ++t;
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (task + b * kThreads < n_tasks) {
          float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 f0 = __half22float2(as_h2(v[b][i].x)), f1 = __half22float2(as_h2(v[b][i].y));
            const float2 f2 = __half22float2(as_h2(v[b][i].z)), f3 = __half22float2(as_h2(v[b][i].w));
            s0 += (f0.x + f0.y) + (f1.x + f1.y);
            s1 += (f2.x + f2.y) + (f3.x + f3.y);
          }
          const __half2 hl = f16_hi_lo((s0 + s1) * (1.0f / 32.0f));
          __half* dst = xsh + 4 * ((jb[b] >> 1) * n_tok + tb[b]) + (jb[b] & 1);
          dst[0] = __low2half(hl);
          dst[2] = __high2half(hl);
        }
      }
    }
  }
  __syncthreads();

  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  // One super-block; MORE: the next one's half 0 and scales load while half 1 multiplies. The
  // last one is peeled off rather than predicated (under a branch ptxas sinks the loads to the
  // end of the loop, where they overlap nothing).
  auto sb_step = [&](auto more) {
    load_half(q + 64, h1);
    float t[2][8], u[8];
    mma_half<true>(h0, sc.sm.x, sc.sm.y, xh, xs, n_tok, magic, t, u);
    if constexpr (decltype(more)::value) {
      load_half(q + kQ4krBlkBytes, h0);
      load_scales(sm + kQ4krBlkBytes, dm0 + kQ4krBlkBytes, dm1 + kQ4krBlkBytes, sc_next);
    }
    mma_half<false>(h1, sc.sm.z, sc.sm.w, xh + 128, xs + 2 * n_tok, n_tok, magic, t, u);
    apply_scales(sc.dd, t, u, acc);
  };
  int s = warp;
  for (; s + 4 < n_sb; s += 4) {
    sb_step(std::true_type{});
    sc = sc_next;
    q += kQ4krBlkBytes;
    sm += kQ4krBlkBytes;
    dm0 += kQ4krBlkBytes;
    dm1 += kQ4krBlkBytes;
    xh += 1024;
    xs += 16 * n_tok;
  }
  if (s < n_sb) sb_step(std::false_type{});

  // The tile's 4 warps meet: lane L's accumulator i is row (L & 1) + 2·(i >> 1 & 1) + 4·(L >> 4)
  // of quad pair L / 4 % 4, token (i & 1) + (L & 2) + 4·(i >> 2).
  float(*r)[8][32] = red + 4 * tile;
#pragma unroll
  for (int i = 0; i < 8; ++i) r[warp][i][lane] = acc[i];
  __syncthreads();
  for (int k = threadIdx.x & 127; k < 8 * 32; k += 128) {
    const int i = k >> 5, l = k & 31;
    const float sum = (r[0][i][l] + r[1][i][l]) + (r[2][i][l] + r[3][i][l]);
    const int64_t n = n0 + 8 * ((l >> 2) & 3) + (l & 1) + 2 * ((i >> 1) & 1) + ((l >> 2) & 4);
    const int tk = (i & 1) + (l & 2) + 4 * (i >> 2);
    if (n < N && tk < n_tok) y[static_cast<int64_t>(tk) * N + n] = __float2half_rn(sum);
  }
}

template <int TILES, int MINB>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const int n_tok = static_cast<int>(x.rows());
  const size_t smem = static_cast<size_t>(K / 64) * n_tok * sizeof(uint2);
  const unsigned blocks = static_cast<unsigned>((N + 32 * TILES - 1) / (32 * TILES));
  VI_CUDA_CHECK(pdl_launch(gemv_q4kr_volta_kernel<TILES, MINB>, dim3(blocks), dim3(128 * TILES), smem, stream_of(ctx),
                           w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(), n_tok, N,
                           static_cast<int>(K / kQKK), K, kQ4krMagic));
}

}  // namespace

GemvQ4krVoltaShape gemv_q4kr_volta_default_shape(int64_t N, int64_t K) {
  // Prediction, not yet measured on a V100 (docs/notes/gemv.md): two tiles per block halve the
  // activation sums per weight value and still give the 5120-row matrices one block of 8 warps
  // on each of a V100's 80 SMs.
  (void)N;
  (void)K;
  return {2, 2};
}

std::string gemv_q4kr_volta_shape_name(const GemvQ4krVoltaShape& s) {
  if (s.tiles == 0) return "auto";
  return fmt::format("m8n8k4, {} tiles/block, {} blocks/SM", s.tiles, s.blocks);
}

std::vector<GemvQ4krVoltaShape> gemv_q4kr_volta_shapes() { return {{1, 4}, {2, 2}, {4, 1}}; }

bool gemv_q4kr_volta_supports(const Tensor& x, const Tensor& w) {
  if (w.dtype() != DType::Q4_KR || x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  const int64_t K = w.dim(1);
  // 16-byte weight and activation loads; the activation sums fit the shared memory.
  return K % 1024 == 0 && K <= kMaxK && x.cols() == K && w.row_bytes() % 16 == 0 && is_aligned(w.data(), 16) &&
         is_aligned(x.data(), 16);
}

void gemv_q4kr_volta(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvQ4krVoltaShape shape) {
  VI_CHECK(gemv_q4kr_volta_supports(x, w), "gemv_q4kr_volta: x {} {} rows, w {} K={}: not a call it takes",
           dtype_name(x.dtype()), x.rows(), dtype_name(w.dtype()), w.dim(1));
  if (shape.tiles == 0) shape = gemv_q4kr_volta_default_shape(w.dim(0), w.dim(1));
  const int key = shape.tiles * 10 + shape.blocks;
  switch (key) {
    case 14: launch<1, 4>(ctx, x, w, y); break;
    case 22: launch<2, 2>(ctx, x, w, y); break;
    case 41: launch<4, 1>(ctx, x, w, y); break;
    default: VI_FAIL("gemv_q4kr_volta: no kernel '{}'", gemv_q4kr_volta_shape_name(shape));
  }
}

}  // namespace vi::cuda
