// The mailbox communicator's kernels and their host side (mailbox_communicator.h).
//
// One collective is one kernel per rank, `blocks` blocks each. Block b of every rank moves chunk b
// of the tensor and talks only to block b of the other ranks, through its own flag word per rank:
// the blocks of a kernel never wait for each other, so a kernel needs no grid-wide barrier and
// fits wherever its blocks are scheduled. Block b's round e (e = 1, 2, ...; its own counter):
//   1. wait until every rank's flag b reaches e - 1: they all finished round e - 2, the last one
//      that used this round's slot (slots alternate by e's parity);
//   2. write a header (what the rank brought) and its chunk into its slot, fence, flag b = e;
//   3. wait until every rank's flag b reaches e, check their headers against its own;
//   4. read every rank's chunk in rank order (sum, or copy into the gathered output).
// A rank can therefore run at most one round ahead of the slowest: its round e + 1 writes the
// other slot, and its round e + 2 waits in step 1 for the slowest rank's round e + 1.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/error.h"
#include "parallel/barrier.h"
#include "parallel/mailbox_communicator.h"
#include "parallel/shard_plan.h"

#define VI_MBOX_CHECK(call)                                                                                     \
  do {                                                                                                          \
    cudaError_t vi_e_ = (call);                                                                                 \
    if (vi_e_ != cudaSuccess)                                                                                   \
      ::vi::fail_at(__FILE__, __LINE__, fmt::format("{} failed: {}", #call, cudaGetErrorString(vi_e_)));        \
  } while (0)

namespace vi::parallel {

namespace {

enum Code : int { kOk = 0, kTimeout = 1, kMismatch = 2, kAborted = 3 };
enum Op : int { kReduce = 0, kGather = 1 };

// Why a block of a rank gave up (pinned host memory, mapped into every device; one per rank and
// block, so each has one writer at a time and no atomics cross PCIe, where they are not atomic).
// The writer fills the fields, fences, and only then sets `set`: a host that reads set != 0
// reads the fields that go with it. The earliest report (GPU global timer) is the cause.
struct Report {
  int64_t time_ns;
  int set, code, op, rank;  // rank: the late rank, or the one whose header differed
  int64_t mine[3];          // the reporter's header (mismatch) or its round (timeout)
  int64_t theirs[3];
};

// What a rank brought to a round; read by the others after its flag. values: the reduced tensor's
// element count, or the gathered part's rows and columns.
struct Header {
  int64_t a, b;   // all-reduce: (numel, 0); gather: (rows, cols)
  int64_t dtype;  // DType, and 256 * op so that a reduce never meets a gather unnoticed
  int64_t pad;
};

struct View {
  char* slot[2][kMaxWorld];        // parity, rank: slot_bytes each (UVA addresses)
  uint64_t* flag[kMaxWorld];       // rank q's flags [blocks], written by q only
  Header* hdr[2][kMaxWorld];       // parity, rank: [blocks]
  uint64_t* epoch;                 // this rank's rounds done [blocks], then its failed word
                                   // (its own device's memory)
  const volatile int* abort_word;  // pinned host memory; nonzero: give up
  Report* reports;                 // this rank's [blocks]
  int world, rank, blocks;
  int64_t timeout_ns;
};

__device__ __forceinline__ uint64_t ld_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ int64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<int64_t>(t);
}

__device__ void report(const View& v, int code, int op, int rank, const int64_t* mine, const int64_t* theirs) {
  reinterpret_cast<volatile uint64_t*>(v.epoch)[v.blocks] = 1;  // this rank's later rounds skip
  volatile Report* r = v.reports + blockIdx.x;
  if (r->set) return;  // this block reported before: that is the earlier cause
  r->time_ns = now_ns();
  r->code = code;
  r->op = op;
  r->rank = rank;
  for (int i = 0; i < 3; ++i) {
    r->mine[i] = mine ? mine[i] : 0;
    r->theirs[i] = theirs ? theirs[i] : 0;
  }
  __threadfence_system();
  r->set = 1;
}

// Another rank's header, from L2 or the host (never a line this SM cached before the flag).
__device__ __forceinline__ Header load_header(const Header* p) {
  const auto* w = reinterpret_cast<const long long*>(p);
  return {__ldcg(w), __ldcg(w + 1), __ldcg(w + 2), 0};
}

// Thread 0: waits until every other rank's flag b is at least `want`. False (and reported) when
// the group aborts or a rank stays behind past the timeout.
__device__ bool wait_flags(const View& v, int b, uint64_t want, int64_t t0, int op) {
  for (int q = 0; q < v.world; ++q) {
    if (q == v.rank) continue;
    for (unsigned spins = 1; ld_acquire(v.flag[q] + b) < want; ++spins) {
      if (spins % 128 != 0) continue;
      if (*v.abort_word != 0) {
        report(v, kAborted, op, q, nullptr, nullptr);
        return false;
      }
      if (now_ns() - t0 > v.timeout_ns) {
        const int64_t round[3] = {static_cast<int64_t>(want), 0, 0};
        report(v, kTimeout, op, q, round, nullptr);
        return false;
      }
    }
  }
  return true;
}

// Thread 0, steps 1 and 2's header: false when the group has failed (nothing of this round runs).
__device__ bool begin_round(const View& v, int b, const Header& h, uint64_t* e, int64_t* t0, int op) {
  if (*v.abort_word != 0) {
    report(v, kAborted, op, v.rank, nullptr, nullptr);
    return false;
  }
  // This rank failed in an earlier round: the flags no longer agree, so nothing runs until reset.
  // (Another rank's failure reaches this one as a round it waits for in vain, or a header.)
  if (reinterpret_cast<volatile uint64_t*>(v.epoch)[v.blocks] != 0) return false;
  *e = v.epoch[b] + 1;
  *t0 = now_ns();
  if (!wait_flags(v, b, *e - 1, *t0, op)) return false;
  v.hdr[*e & 1][v.rank][b] = h;
  return true;
}

// Thread 0, steps 2's flag and 3 (the chunk is written and fenced by every thread before).
__device__ bool meet(const View& v, int b, uint64_t e, int64_t t0, const Header& h, int op) {
  st_release(v.flag[v.rank] + b, e);
  if (!wait_flags(v, b, e, t0, op)) return false;
  for (int q = 0; q < v.world; ++q) {
    const Header o = load_header(v.hdr[e & 1][q] + b);
    // A gather's parts may differ in columns (b), not in rows (a).
    const bool same = o.dtype == h.dtype && o.a == h.a && (op == kGather || o.b == h.b);
    if (!same) {
      const int64_t mine[3] = {h.a, h.b, h.dtype}, theirs[3] = {o.a, o.b, o.dtype};
      report(v, kMismatch, op, q, mine, theirs);
      return false;
    }
  }
  return true;
}

// [begin, end) of n values that block b of `blocks` moves: multiples of 8 values, so that every
// chunk but the last starts 16-byte aligned.
__device__ __forceinline__ void chunk_of(int64_t n, int b, int blocks, int64_t* begin, int64_t* end) {
  const int64_t units = (n + 7) / 8;
  const int64_t per = (units + blocks - 1) / blocks;
  *begin = min(n, b * per * 8);
  *end = min(n, (b + 1) * per * 8);
}

template <class T>
__device__ __forceinline__ float load_f32(const T* p);
template <>
__device__ __forceinline__ float load_f32<float>(const float* p) { return __ldcg(p); }
template <>
__device__ __forceinline__ float load_f32<__half>(const __half* p) { return __half2float(__ldcg(p)); }
template <>
__device__ __forceinline__ float load_f32<uint16_t>(const uint16_t* p) {  // bf16
  return __uint_as_float(static_cast<uint32_t>(__ldcg(reinterpret_cast<const unsigned short*>(p))) << 16);
}
template <class T>
__device__ __forceinline__ T round_to(float f);
template <>
__device__ __forceinline__ float round_to<float>(float f) { return f; }
template <>
__device__ __forceinline__ __half round_to<__half>(float f) { return __float2half_rn(f); }
template <>
__device__ __forceinline__ uint16_t round_to<uint16_t>(float f) {  // nearest even, as core/half.h
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// x: n values of this round on this rank (in place). T: float, __half or uint16_t (bf16).
template <class T>
__global__ void all_reduce_kernel(View v, T* x, int64_t n, Header h) {
  const int b = blockIdx.x;
  __shared__ int ok;
  __shared__ uint64_t e;
  __shared__ int64_t t0;
  if (threadIdx.x == 0) ok = begin_round(v, b, h, &e, &t0, kReduce);
  __syncthreads();
  if (!ok) return;
  int64_t begin, end;
  chunk_of(n, b, v.blocks, &begin, &end);
  T* mine = reinterpret_cast<T*>(v.slot[e & 1][v.rank]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = x[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) ok = meet(v, b, e, t0, h, kReduce);
  __syncthreads();
  if (!ok) return;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    // Rank order from rank 0's value (not 0 + ...: -0 + -0 stays -0), as the host communicator.
    float s = load_f32(reinterpret_cast<const T*>(v.slot[e & 1][0]) + i);
    for (int q = 1; q < v.world; ++q) s += load_f32(reinterpret_cast<const T*>(v.slot[e & 1][q]) + i);
    x[i] = round_to<T>(s);
  }
  __syncthreads();  // every thread's reads of the slots precede the round's end
  if (threadIdx.x == 0) v.epoch[b] = e;
}

// part: [rows, cols] of this rank (contiguous); out: [rows, out_cols] or null (this rank only
// contributes). T: float or uint16_t, standing for any 4- or 2-byte dtype (copies, no arithmetic).
template <class T>
__global__ void all_gather_kernel(View v, const T* part, T* out, int64_t out_cols, Header h) {
  const int b = blockIdx.x;
  __shared__ int ok;
  __shared__ uint64_t e;
  __shared__ int64_t t0;
  if (threadIdx.x == 0) ok = begin_round(v, b, h, &e, &t0, kGather);
  __syncthreads();
  if (!ok) return;
  int64_t begin, end;
  chunk_of(h.a * h.b, b, v.blocks, &begin, &end);
  T* mine = reinterpret_cast<T*>(v.slot[e & 1][v.rank]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = part[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    ok = meet(v, b, e, t0, h, kGather);
    if (ok && out != nullptr) {  // the parts must fill out's columns exactly
      int64_t cols = 0;
      for (int q = 0; q < v.world; ++q) cols += load_header(v.hdr[e & 1][q] + b).b;
      if (cols != out_cols) {
        const int64_t mine_h[3] = {h.a, out_cols, h.dtype}, theirs[3] = {h.a, cols, h.dtype};
        report(v, kMismatch, kGather, v.rank, mine_h, theirs);
        ok = 0;
      }
    }
  }
  __syncthreads();
  if (!ok) return;
  if (out != nullptr) {
    int64_t c0 = 0;
    for (int q = 0; q < v.world; ++q) {
      const int64_t cq = load_header(v.hdr[e & 1][q] + b).b;
      int64_t qb, qe;
      chunk_of(h.a * cq, b, v.blocks, &qb, &qe);
      const T* src = reinterpret_cast<const T*>(v.slot[e & 1][q]);
      for (int64_t i = qb + threadIdx.x; i < qe; i += blockDim.x) out[(i / cq) * out_cols + c0 + i % cq] = __ldcg(src + i);
      c0 += cq;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) v.epoch[b] = e;
}

constexpr int kThreads = 256;

class MailboxCommunicator final : public Communicator {
 public:
  MailboxCommunicator(const std::vector<int>& devices, const MailboxOptions& opt)
      : devices_(devices), opt_(opt), world_(static_cast<int>(devices.size())) {
    VI_CHECK(world_ >= 1 && world_ <= kMaxWorld, "tensor parallel over {} ranks: 1 to {} are supported", world_,
             kMaxWorld);
    VI_CHECK(opt.timeout.count() > 0, "a collective's timeout must be positive, not {} ms", opt.timeout.count());
    VI_CHECK(opt.blocks >= 1 && opt.blocks <= 1024, "mailbox: {} blocks a collective (1 to 1024)", opt.blocks);
    VI_CHECK(opt.slot_bytes >= 4096 && opt.slot_bytes % 256 == 0,
             "mailbox: a slot of {} bytes (at least 4096, a multiple of 256)", opt.slot_bytes);
    int count = 0;
    VI_MBOX_CHECK(cudaGetDeviceCount(&count));
    for (int d : devices_)
      VI_CHECK(d >= 0 && d < count, "mailbox communicator: CUDA device {} does not exist ({} device(s))", d, count);
    if (opt.place == MailboxPlace::kDevice)
      for (int d : devices_)
        VI_CHECK(d == devices_[0], "mailbox in device memory: every rank must be on one GPU (ranks on devices {} and {}); "
                                   "use the host or peer mailbox across GPUs", devices_[0], d);
    if (opt.place == MailboxPlace::kPeer) enable_peer_access();

    const size_t report_bytes = sizeof(Report) * world_ * opt.blocks;
    VI_MBOX_CHECK(cudaHostAlloc(&host_, report_bytes + 64, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host_, 0, report_bytes + 64);
    reports_ = static_cast<Report*>(host_);
    abort_word_ = reinterpret_cast<volatile int*>(static_cast<char*>(host_) + report_bytes);

    flags_bytes_ = round_up(sizeof(uint64_t) * opt.blocks);
    hdr_bytes_ = round_up(sizeof(Header) * opt.blocks);
    region_bytes_ = flags_bytes_ + 2 * hdr_bytes_ + 2 * opt.slot_bytes;
    regions_.assign(world_, nullptr);
    epochs_.assign(world_, nullptr);
    if (opt.place == MailboxPlace::kHost) {
      VI_MBOX_CHECK(cudaHostAlloc(&shared_, region_bytes_ * world_, cudaHostAllocMapped | cudaHostAllocPortable));
      for (int r = 0; r < world_; ++r) regions_[r] = static_cast<char*>(shared_) + region_bytes_ * r;
    } else if (opt.place == MailboxPlace::kDevice) {
      Guard g(devices_[0]);
      VI_MBOX_CHECK(cudaMalloc(&shared_, region_bytes_ * world_));
      for (int r = 0; r < world_; ++r) regions_[r] = static_cast<char*>(shared_) + region_bytes_ * r;
    } else {
      for (int r = 0; r < world_; ++r) {
        Guard g(devices_[r]);
        VI_MBOX_CHECK(cudaMalloc(&regions_[r], region_bytes_));
      }
    }
    for (int r = 0; r < world_; ++r) {
      Guard g(devices_[r]);
      VI_MBOX_CHECK(cudaMalloc(&epochs_[r], sizeof(uint64_t) * (opt.blocks + 1)));
    }
    zero_state();
    const bool one_gpu = std::all_of(devices_.begin(), devices_.end(), [&](int d) { return d == devices_[0]; });
    bool pace = opt.pace_host < 0 ? world_ > 1 && one_gpu : opt.pace_host != 0;
    if (const char* env = std::getenv("VI_MAILBOX_PACE")) pace = std::atoi(env) != 0;
    if (pace) pace_ = std::make_unique<HostBarrier>(world_, opt.timeout);
    trace_ = std::getenv("VI_TP_TRACE") != nullptr && std::atoi(std::getenv("VI_TP_TRACE")) != 0;
    calls_.assign(world_, 0);
  }

  ~MailboxCommunicator() override {
    // Kernels still queued would read freed memory: make them leave, then wait for them.
    *abort_word_ = 1;
    for (int d : devices_) {
      Guard g(d);
      cudaDeviceSynchronize();
    }
    if (opt_.place == MailboxPlace::kHost) {
      cudaFreeHost(shared_);
    } else if (opt_.place == MailboxPlace::kDevice) {
      Guard g(devices_[0]);
      cudaFree(shared_);
    } else {
      for (int r = 0; r < world_; ++r) {
        Guard g(devices_[r]);
        cudaFree(regions_[r]);
      }
    }
    for (int r = 0; r < world_; ++r) {
      Guard g(devices_[r]);
      cudaFree(epochs_[r]);
    }
    cudaFreeHost(host_);
  }

  int world() const override { return world_; }
  const char* name() const override { return mailbox_place_name(opt_.place); }

  void all_reduce_sum(int rank, Tensor& x, void* stream) override {
    check_rank(rank);
    const DType t = x.dtype();
    VI_CHECK(x.device() == Device::CUDA && (t == DType::F32 || t == DType::F16 || t == DType::BF16),
             "all_reduce_sum: {} {} on {} (GPU f32, f16 or bf16 tensors only)", x.shape_str(), dtype_name(t),
             device_name(x.device()));
    const size_t es = dtype_info(t).block_bytes;
    const int64_t n = x.numel();
    const int64_t per_round = static_cast<int64_t>(opt_.slot_bytes / es) / 8 * 8;
    const Header h{n, 0, static_cast<int64_t>(t) + 256 * kReduce, 0};
    trace(rank, h);
    const View v = view(rank);
    auto* s = static_cast<cudaStream_t>(stream);
    // Every rank takes the same rounds (same n, same dtype: the header checks it in round one);
    // an empty tensor still takes one, so that it meets the other ranks' first.
    const int64_t rounds = std::max<int64_t>(1, (n + per_round - 1) / per_round);
    for (int64_t k = 0; k < rounds; ++k) {
      const int64_t off = k * per_round, m = std::min(per_round, n - off);
      char* p = static_cast<char*>(x.data()) + off * static_cast<int64_t>(es);
      before_queueing(rank);
      switch (t) {
        case DType::F32: all_reduce_kernel<float><<<opt_.blocks, kThreads, 0, s>>>(v, reinterpret_cast<float*>(p), m, h); break;
        case DType::F16: all_reduce_kernel<__half><<<opt_.blocks, kThreads, 0, s>>>(v, reinterpret_cast<__half*>(p), m, h); break;
        default: all_reduce_kernel<uint16_t><<<opt_.blocks, kThreads, 0, s>>>(v, reinterpret_cast<uint16_t*>(p), m, h); break;
      }
      VI_MBOX_CHECK(cudaGetLastError());
      after_queueing(rank);
    }
  }

  void all_gather_cols(int rank, const Tensor& part, Tensor* out, void* stream) override {
    check_rank(rank);
    const DType t = part.dtype();
    const size_t es = dtype_info(t).block_bytes;
    VI_CHECK(part.device() == Device::CUDA && part.ndim() == 2 && dtype_info(t).block_elems == 1 && es <= 4 && es != 1,
             "all_gather_cols: {} {} on {} (GPU 2-D tensors of 2- or 4-byte values only)", part.shape_str(),
             dtype_name(t), device_name(part.device()));
    VI_CHECK(static_cast<size_t>(part.numel()) * es <= opt_.slot_bytes,
             "all_gather_cols: a part of {} bytes ({}) exceeds the mailbox slot of {} bytes", part.numel() * es,
             part.shape_str(), opt_.slot_bytes);
    if (out != nullptr)
      VI_CHECK(out->device() == Device::CUDA && out->ndim() == 2 && out->dtype() == t && out->rows() == part.rows(),
               "all_gather_cols: rank {} wants the parts in {} {}, its part is {} {}", rank, out->shape_str(),
               dtype_name(out->dtype()), part.shape_str(), dtype_name(t));
    const Header h{part.rows(), part.cols(), static_cast<int64_t>(t) + 256 * kGather, 0};
    trace(rank, h);
    const View v = view(rank);
    auto* s = static_cast<cudaStream_t>(stream);
    const int64_t oc = out ? out->cols() : 0;
    before_queueing(rank);
    if (es == 4)
      all_gather_kernel<float><<<opt_.blocks, kThreads, 0, s>>>(v, static_cast<const float*>(part.data()),
                                                                 out ? static_cast<float*>(out->data()) : nullptr, oc, h);
    else
      all_gather_kernel<uint16_t><<<opt_.blocks, kThreads, 0, s>>>(
          v, static_cast<const uint16_t*>(part.data()), out ? static_cast<uint16_t*>(out->data()) : nullptr, oc, h);
    VI_MBOX_CHECK(cudaGetLastError());
    after_queueing(rank);
  }

  void check() override {
    const volatile Report* first = nullptr;
    for (int i = 0; i < world_ * opt_.blocks; ++i) {
      const volatile Report* r = reports_ + i;
      if (r->set == 0) continue;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (first == nullptr || r->time_ns < first->time_ns) first = r;
    }
    if (first == nullptr) return;
    Report copy;
    std::memcpy(&copy, const_cast<const Report*>(first), sizeof(Report));
    throw Error("tensor-parallel group aborted: " + describe(copy, static_cast<int>((first - reports_) / opt_.blocks)));
  }

  void abort(const std::string& why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (why_.empty()) why_ = why;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *abort_word_ = 1;
    if (pace_) pace_->abort(why);
  }

  void reset() override {
    if (pace_) pace_->reset();
    std::fill(calls_.begin(), calls_.end(), 0);
    *abort_word_ = 1;  // a kernel still waiting for a rank that never came leaves now
    for (int d : devices_) {
      Guard g(d);
      VI_MBOX_CHECK(cudaDeviceSynchronize());
    }
    zero_state();
  }

 private:
  class Guard {  // the device for a scope (the caller's restored)
   public:
    explicit Guard(int d) {
      VI_MBOX_CHECK(cudaGetDevice(&prev_));
      VI_MBOX_CHECK(cudaSetDevice(d));
    }
    ~Guard() { cudaSetDevice(prev_); }

   private:
    int prev_ = 0;
  };

  static size_t round_up(size_t b) { return (b + 255) / 256 * 256; }

  // With VI_TP_TRACE=1, a line per collective as a rank queues it: where ranks part ways.
  void trace(int rank, const Header& h) {
    const int64_t k = calls_[rank]++;
    if (trace_)
      std::fprintf(stderr, "[mailbox] rank %d collective %lld: %s\n", rank, static_cast<long long>(k),
                   header_str(reinterpret_cast<const int64_t*>(&h)).c_str());
  }
  // With pacing, a round's kernel is queued between two barriers of the ranks' host threads
  // (which throw when the group is aborted or a rank's thread stays away past the timeout), so
  // that whenever a rank's thread is outside a collective, every round queued by any rank has
  // been queued by all of them, and what is queued can finish without any host:
  // - before: a rank's thread may block in a call that waits for the GPU (an allocation, a cuBLAS
  //   handle's creation); had a partner's round already been running, waiting for this rank's
  //   round, that wait would never end;
  // - after: ranks on one GPU may share a hardware queue, which starts kernels in the order they
  //   were queued; had rank 0 queued work behind its round before rank 1 queued the round, that
  //   work (waiting for rank 0's round, which waits for rank 1's) would stand in front of it.
  void before_queueing(int rank) {
    if (pace_) pace_->wait(rank);
  }
  void after_queueing(int rank) {
    if (pace_) pace_->wait(rank);
  }

  void check_rank(int rank) const {
    VI_CHECK(rank >= 0 && rank < world_, "rank {} is not one of the group's {} ranks", rank, world_);
  }

  void enable_peer_access() {
    for (int a = 0; a < world_; ++a)
      for (int b = 0; b < world_; ++b) {
        if (devices_[a] == devices_[b]) continue;
        int can = 0;
        VI_MBOX_CHECK(cudaDeviceCanAccessPeer(&can, devices_[a], devices_[b]));
        VI_CHECK(can, "peer mailbox: GPU {} cannot access GPU {}'s memory (no peer-to-peer path); use the host mailbox",
                 devices_[a], devices_[b]);
        Guard g(devices_[a]);
        const cudaError_t e = cudaDeviceEnablePeerAccess(devices_[b], 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // clears it
        } else {
          VI_MBOX_CHECK(e);
        }
      }
  }

  View view(int rank) const {
    View v{};
    for (int q = 0; q < world_; ++q) {
      char* base = static_cast<char*>(regions_[q]);
      v.flag[q] = reinterpret_cast<uint64_t*>(base);
      for (int p = 0; p < 2; ++p) {
        v.hdr[p][q] = reinterpret_cast<Header*>(base + flags_bytes_ + p * hdr_bytes_);
        v.slot[p][q] = base + flags_bytes_ + 2 * hdr_bytes_ + p * opt_.slot_bytes;
      }
    }
    v.epoch = static_cast<uint64_t*>(epochs_[rank]);
    v.abort_word = abort_word_;
    v.reports = reports_ + rank * opt_.blocks;
    v.world = world_;
    v.rank = rank;
    v.blocks = opt_.blocks;
    v.timeout_ns = static_cast<int64_t>(opt_.timeout.count()) * 1000000;
    return v;
  }

  // Flags, headers and epochs to zero, nothing reported, not aborted. Only while no kernel runs.
  void zero_state() {
    for (int r = 0; r < world_; ++r) {
      if (opt_.place == MailboxPlace::kHost) {
        std::memset(regions_[r], 0, flags_bytes_ + 2 * hdr_bytes_);
      } else {
        Guard g(opt_.place == MailboxPlace::kDevice ? devices_[0] : devices_[r]);
        VI_MBOX_CHECK(cudaMemset(regions_[r], 0, flags_bytes_ + 2 * hdr_bytes_));
        VI_MBOX_CHECK(cudaDeviceSynchronize());
      }
      Guard g(devices_[r]);
      VI_MBOX_CHECK(cudaMemset(epochs_[r], 0, sizeof(uint64_t) * (opt_.blocks + 1)));
      VI_MBOX_CHECK(cudaDeviceSynchronize());
    }
    std::lock_guard<std::mutex> lock(mu_);
    why_.clear();
    std::memset(static_cast<void*>(reports_), 0, sizeof(Report) * world_ * opt_.blocks);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *abort_word_ = 0;
  }

  static std::string header_str(const int64_t* h) {
    const std::string dt = dtype_name(static_cast<DType>(h[2] % 256));
    const char* what = h[2] / 256 == kReduce ? "all_reduce_sum" : "all_gather_cols";
    return h[2] / 256 == kReduce ? fmt::format("{} of {} {} values", what, h[0], dt)
                                 : fmt::format("{} of [{}, {}] {}", what, h[0], h[1], dt);
  }

  // reporter: the rank whose kernel gave up.
  std::string describe(const Report& s, int reporter) {
    switch (s.code) {
      case kTimeout:
        return fmt::format("rank(s) {} did not reach the collective within {} ms (rank {} waited in its round {})", s.rank,
                           opt_.timeout.count(), reporter, s.mine[0]);
      case kMismatch:
        if (s.rank == reporter)  // a gather's parts do not fill the reporter's out
          return fmt::format("all_gather_cols: rank {} wants the parts in {} columns, they make {}", s.rank, s.mine[1],
                             s.theirs[1]);
        return fmt::format("rank {} brought {}, rank {} {}", s.rank, header_str(s.theirs), reporter,
                           header_str(s.mine));
      default: {
        std::lock_guard<std::mutex> lock(mu_);
        return why_.empty() ? std::string("aborted") : why_;
      }
    }
  }

  const std::vector<int> devices_;
  const MailboxOptions opt_;
  const int world_;
  void* host_ = nullptr;      // the reports, then the abort word (pinned, mapped)
  Report* reports_ = nullptr;  // [world][blocks]
  volatile int* abort_word_ = nullptr;
  void* shared_ = nullptr;  // kHost / kDevice: every rank's region, rank after rank
  std::vector<void*> regions_;  // rank r's flags, headers (two parities) and slots (two)
  std::vector<void*> epochs_;   // rank r's rounds done per block, on devices_[r]
  size_t flags_bytes_ = 0, hdr_bytes_ = 0, region_bytes_ = 0;
  std::mutex mu_;
  std::string why_;  // abort()'s cause
  std::unique_ptr<HostBarrier> pace_;  // null: ranks queue collectives without meeting
  bool trace_ = false;
  std::vector<int64_t> calls_;  // collectives each rank has queued (its own thread's counter)
};

}  // namespace

const char* mailbox_place_name(MailboxPlace p) {
  switch (p) {
    case MailboxPlace::kDevice: return "device mailbox";
    case MailboxPlace::kHost: return "host mailbox";
    default: return "peer mailbox";
  }
}

namespace {
[[maybe_unused]] const bool registered = [] {
  mailbox_factory() = [](const std::vector<int>& devices, const MailboxOptions& opt) -> std::unique_ptr<Communicator> {
    return std::make_unique<MailboxCommunicator>(devices, opt);
  };
  return true;
}();
}  // namespace

}  // namespace vi::parallel
