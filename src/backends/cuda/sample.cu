// CUDA kernels of sample; see sample.cuh for the plan.
#include <algorithm>
#include <climits>
#include <vector>

#include "backends/cuda/pdl.cuh"
#include "backends/cuda/sample.cuh"
#include "ops/sample.h"

namespace vi::cuda {
namespace {

struct SlicePartial {
  float max;
  float sumexp;  // sum of exp(l - max) over the slice
  int32_t argmax;
};

struct Cand {
  float logit;
  int32_t id;
};

__device__ __forceinline__ bool better(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

// Sorts n (a power of two, <= 2 * blockDim.x * per) pairs descending by (logit, -id).
__device__ void bitonic_sort(float* val, int32_t* idx, int n) {
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int l = i ^ j;
        if (l > i) {
          const bool desc = (i & k) == 0;  // this run sorts descending
          const bool swap = desc ? better(val[l], idx[l], val[i], idx[i]) : better(val[i], idx[i], val[l], idx[l]);
          if (swap) {
            const float tv = val[i];
            val[i] = val[l];
            val[l] = tv;
            const int32_t ti = idx[i];
            idx[i] = idx[l];
            idx[l] = ti;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Arg-max over the block (ties: lowest id); every thread gets the result.
__device__ void block_argmax(float& v, int32_t& id, float* red_v, int32_t* red_i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red_v[warp] = v, red_i[warp] = id;
  __syncthreads();
  v = lane < nwarps ? red_v[lane] : -INFINITY;
  id = lane < nwarps ? red_i[lane] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
}

// Grid (slices, rows). k_row[r]: candidates to keep per slice for row r (0: greedy row).
template <class T>
__global__ void __launch_bounds__(kSampleThreads)
    sample_slice_kernel(const T* __restrict__ logits, int64_t V, const ops::LogitPenalty* __restrict__ pen,
                        const int32_t* __restrict__ pen_start, const int32_t* __restrict__ k_row, int k_stride,
                        SlicePartial* __restrict__ part, Cand* __restrict__ cand) {
  __shared__ float val[kSampleSlice];
  __shared__ int32_t idx[kSampleSlice];
  __shared__ float red_v[32];
  __shared__ int32_t red_i[32];
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.y, m = blockIdx.x, M = gridDim.x;
  const int64_t base = int64_t(m) * kSampleSlice;
  const T* row = logits + int64_t(r) * V;
  for (int i = threadIdx.x; i < kSampleSlice; i += blockDim.x) {
    const int64_t g = base + i;
    val[i] = g < V ? to_f32(row[g]) : -INFINITY;
    idx[i] = g < V ? static_cast<int32_t>(g) : INT_MAX;
  }
  __syncthreads();
  for (int j = pen_start[r] + threadIdx.x; j < pen_start[r + 1]; j += blockDim.x) {
    const int64_t i = pen[j].token - base;
    if (i < 0 || i >= kSampleSlice) continue;
    float l = val[i];
    if (pen[j].repeat != 1.0f) l = l > 0 ? l / pen[j].repeat : l * pen[j].repeat;
    val[i] = l - pen[j].subtract;
  }
  __syncthreads();
  float v = -INFINITY;
  int32_t id = INT_MAX;
  for (int i = threadIdx.x; i < kSampleSlice; i += blockDim.x)
    if (better(val[i], idx[i], v, id)) v = val[i], id = idx[i];
  block_argmax(v, id, red_v, red_i);
  float s = 0.0f;
  for (int i = threadIdx.x; i < kSampleSlice; i += blockDim.x)
    if (idx[i] != INT_MAX) s += __expf(val[i] - v);
  s = block_sum(s, red_v);
  if (threadIdx.x == 0) part[int64_t(r) * M + m] = {v, s, id};
  const int k = k_row[r];
  if (k == 0) return;  // greedy row: the arg-max is all it needs
  bitonic_sort(val, idx, kSampleSlice);
  Cand* out = cand + (int64_t(r) * M + m) * k_stride;
  for (int i = threadIdx.x; i < k; i += blockDim.x) out[i] = {val[i], idx[i]};
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_row_kernel(int M, int64_t V, const ops::SampleParams* __restrict__ params, const int32_t* __restrict__ k_row,
                      int k_stride, const SlicePartial* __restrict__ part, const Cand* __restrict__ cand,
                      ops::SampledToken* __restrict__ out) {
  __shared__ float val[kSampleMaxCands];
  __shared__ int32_t idx[kSampleMaxCands];
  __shared__ float red_v[32];
  __shared__ int32_t red_i[32];
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const SlicePartial* pr = part + int64_t(r) * M;
  float v = -INFINITY;
  int32_t id = INT_MAX;
  for (int m = threadIdx.x; m < M; m += blockDim.x)
    if (better(pr[m].max, pr[m].argmax, v, id)) v = pr[m].max, id = pr[m].argmax;
  block_argmax(v, id, red_v, red_i);
  const int k = k_row[r];
  if (k == 0) {  // greedy: log-softmax of the winner over every slice
    float s = 0.0f;
    for (int m = threadIdx.x; m < M; m += blockDim.x) s += pr[m].sumexp * __expf(pr[m].max - v);
    s = block_sum(s, red_v);
    if (threadIdx.x == 0) out[r] = {id, -logf(s)};
    return;
  }
  const int n = M * k;
  int n2 = 1;
  while (n2 < n) n2 <<= 1;
  const Cand* cr = cand + int64_t(r) * M * k_stride;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    if (i < n) {
      const Cand c = cr[(i / k) * k_stride + i % k];
      val[i] = c.logit;
      idx[i] = c.id;
    } else {
      val[i] = -INFINITY;
      idx[i] = INT_MAX;
    }
  }
  __syncthreads();
  bitonic_sort(val, idx, n2);
  if (threadIdx.x != 0) return;
  // From here the CPU op's arithmetic, in its order: survivors' softmax at temperature 1,
  // top-p, min-p, softmax at the temperature, the draw.
  const ops::SampleParams sp = params[r];
  const int top_k = static_cast<int>(sp.top_k > 0 && sp.top_k < V ? int64_t(sp.top_k) : V);
  int keep = top_k;
  const double mx = val[0];
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += exp((val[i] - mx) / 1.0);
  if (sp.top_p < 1.0f) {
    double cum = 0;
    int kk = 0;
    while (kk < keep) {
      cum += exp((val[kk] - mx) / 1.0) / sum;
      ++kk;
      if (cum >= sp.top_p) break;
    }
    keep = kk > 1 ? kk : 1;
  }
  if (sp.min_p > 0.0f) {
    const double floor = (1.0 / sum) * sp.min_p;  // p[0] = exp(0) / sum
    int kk = 1;
    while (kk < keep && exp((val[kk] - mx) / 1.0) / sum >= floor) ++kk;
    keep = kk;
  }
  const double temp = sp.temperature;
  double sum_t = 0;
  for (int i = 0; i < keep; ++i) sum_t += exp((val[i] - mx) / temp);
  double cum = 0;
  int pick = keep - 1;
  for (int i = 0; i < keep; ++i) {
    cum += exp((val[i] - mx) / temp) / sum_t;
    if (sp.uniform < cum) {
      pick = i;
      break;
    }
  }
  out[r] = {idx[pick], static_cast<float>(log(exp((val[pick] - mx) / temp) / sum_t))};
}

int64_t n_slices(int64_t V) { return (V + kSampleSlice - 1) / kSampleSlice; }

int64_t max_top_k(int64_t V) {
  return std::min(std::min(V, int64_t(kSampleSlice)), int64_t(kSampleMaxCands) / n_slices(V));
}

template <class T>
void sample_cuda(ops::Context& ctx, const Tensor& logits, const std::vector<ops::SampleParams>& params,
                 const std::vector<ops::LogitPenalty>& penalties, std::vector<ops::SampledToken>& out) {
  const int64_t R = logits.rows(), V = logits.cols();
  const int64_t M = n_slices(V);
  VI_CHECK(R <= 65535 && M <= INT_MAX, "op 'sample' on cuda: {} rows of {} logits is too many for one launch", R, V);
  // Per-row candidate counts; penalties grouped by row (CSR) for the slice blocks.
  std::vector<int32_t> k_row(static_cast<size_t>(R));
  int k_stride = 1;
  for (int64_t r = 0; r < R; ++r) {
    const ops::SampleParams& p = params[r];
    k_row[r] = p.temperature <= 0.0f ? 0 : static_cast<int32_t>(std::min<int64_t>(p.top_k > 0 ? p.top_k : V, V));
    k_stride = std::max(k_stride, k_row[r]);
  }
  std::vector<ops::LogitPenalty> pen(penalties.begin(), penalties.end());
  std::stable_sort(pen.begin(), pen.end(), [](const auto& a, const auto& b) { return a.row < b.row; });
  std::vector<int32_t> pen_start(static_cast<size_t>(R + 1), 0);
  for (const auto& q : pen) pen_start[q.row + 1]++;
  for (int64_t r = 0; r < R; ++r) pen_start[r + 1] += pen_start[r];

  // One scratch buffer for every small array (one allocation, one upload).
  auto align = [](size_t b) { return (b + 15) / 16 * 16; };
  const size_t o_params = 0;
  const size_t o_k = o_params + align(sizeof(ops::SampleParams) * R);
  const size_t o_ps = o_k + align(sizeof(int32_t) * R);
  const size_t o_pen = o_ps + align(sizeof(int32_t) * (R + 1));
  const size_t o_end_in = o_pen + align(sizeof(ops::LogitPenalty) * std::max<size_t>(pen.size(), 1));
  std::vector<uint8_t> host(o_end_in);
  std::copy_n(reinterpret_cast<const uint8_t*>(params.data()), sizeof(ops::SampleParams) * R, host.data() + o_params);
  std::copy_n(reinterpret_cast<const uint8_t*>(k_row.data()), sizeof(int32_t) * R, host.data() + o_k);
  std::copy_n(reinterpret_cast<const uint8_t*>(pen_start.data()), sizeof(int32_t) * (R + 1), host.data() + o_ps);
  if (!pen.empty())
    std::copy_n(reinterpret_cast<const uint8_t*>(pen.data()), sizeof(ops::LogitPenalty) * pen.size(),
                host.data() + o_pen);
  const size_t o_part = o_end_in;
  const size_t o_cand = o_part + align(sizeof(SlicePartial) * R * M);
  const size_t o_out = o_cand + align(sizeof(Cand) * R * M * k_stride);
  const size_t total = o_out + align(sizeof(ops::SampledToken) * R);
  Scratch buf(ctx, total);
  uint8_t* d = buf.as<uint8_t>();
  VI_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size(), cudaMemcpyHostToDevice, stream_of(ctx)));

  auto* d_params = reinterpret_cast<const ops::SampleParams*>(d + o_params);
  auto* d_k = reinterpret_cast<const int32_t*>(d + o_k);
  auto* d_ps = reinterpret_cast<const int32_t*>(d + o_ps);
  auto* d_pen = reinterpret_cast<const ops::LogitPenalty*>(d + o_pen);
  auto* d_part = reinterpret_cast<SlicePartial*>(d + o_part);
  auto* d_cand = reinterpret_cast<Cand*>(d + o_cand);
  auto* d_out = reinterpret_cast<ops::SampledToken*>(d + o_out);
  VI_CUDA_CHECK(pdl_launch(sample_slice_kernel<T>, dim3(static_cast<unsigned>(M), static_cast<unsigned>(R)),
                           kSampleThreads, 0, stream_of(ctx), logits.ptr<T>(), V, d_pen, d_ps, d_k, k_stride, d_part,
                           d_cand));
  VI_CUDA_CHECK(pdl_launch(sample_row_kernel, static_cast<unsigned>(R), kSampleThreads, 0, stream_of(ctx),
                           static_cast<int>(M), V, d_params, d_k, k_stride, d_part, d_cand, d_out));
  VI_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, sizeof(ops::SampledToken) * R, cudaMemcpyDeviceToHost,
                                stream_of(ctx)));
  VI_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));  // `out` and `host` are read/freed after return
}

[[maybe_unused]] const bool registered = [] {
  ops::sample_table().add(Device::CUDA, DType::F32, sample_cuda<float>);
  ops::sample_table().add(Device::CUDA, DType::F16, sample_cuda<__half>);
  ops::sample_max_top_k_table().add(Device::CUDA, DType::F32, max_top_k);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
