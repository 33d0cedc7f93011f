// The host-memory communicator: ranks are threads of one process and read each other's
// tensors in place between barriers.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "parallel/communicator.h"
#include "parallel/shard_plan.h"

namespace vi::parallel {

namespace {

// A reusable barrier of `world` ranks with a deadline and an abort that wakes every waiter.
class Barrier {
 public:
  Barrier(int world, std::chrono::milliseconds timeout)
      : world_(world),
        timeout_(timeout),
        spin_(static_cast<unsigned>(world) <= std::max(1u, std::thread::hardware_concurrency())),
        here_(world, false) {}

  // Returns once every rank has arrived; throws vi::Error when the group is (or gets) aborted,
  // or when the others do not all arrive within the timeout (which aborts the group, naming them).
  void wait(int rank) {
    uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      throw_if_aborted();
      here_[rank] = true;
      if (++arrived_ == world_) {
        arrived_ = 0;
        std::fill(here_.begin(), here_.end(), false);
        generation_.fetch_add(1, std::memory_order_release);
        cv_.notify_all();
        return;
      }
      gen = generation_.load(std::memory_order_relaxed);
    }
    // The ranks of one pass arrive within microseconds of each other, and a sleep and wake-up
    // costs tens of them (a decode step has a few hundred barriers): look for a while first —
    // unless the ranks outnumber the hardware threads, where a looking rank takes the core a late
    // one needs (3 ranks on 2 cores: 20.7 ms a SmolLM2 step with the look, see
    // docs/notes/tensor_parallel.md). The acquire pairs with the last rank's release, which came
    // after every rank's writes.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_ ? 50 : 0);
    for (int i = 1; spin_; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      if (aborting_.load(std::memory_order_relaxed)) break;
      if (i % 64 == 0 && std::chrono::steady_clock::now() > spin_until) break;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_.load() != gen || !aborted_.empty(); });
    if (generation_.load() != gen) return;
    if (done) throw_if_aborted();
    std::string late;
    for (int r = 0; r < world_; ++r)
      if (!here_[r]) late += fmt::format("{}{}", late.empty() ? "" : ", ", r);
    set_aborted(fmt::format("rank(s) {} did not reach the collective within {} ms", late, timeout_.count()));
    cv_.notify_all();
    throw_if_aborted();
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) set_aborted(why);
    cv_.notify_all();
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.clear();
    aborting_.store(false);
    arrived_ = 0;
    std::fill(here_.begin(), here_.end(), false);
    generation_.fetch_add(1);
  }

 private:
  void set_aborted(std::string why) {  // under mu_
    aborted_ = std::move(why);
    aborting_.store(true);
  }
  void throw_if_aborted() const {
    if (!aborted_.empty()) throw Error("tensor-parallel group aborted: " + aborted_);
  }

  const int world_;
  const std::chrono::milliseconds timeout_;
  const bool spin_;  // look before sleeping (wait)
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<uint64_t> generation_{0};  // rounds completed; written under mu_, read while spinning too
  std::vector<bool> here_;  // ranks waiting in the current round
  std::string aborted_;
  std::atomic<bool> aborting_{false};  // aborted_ is set: what a spinning rank can read without mu_
};

float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]);
    default: return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]);
  }
}

void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = fp32_to_fp16(v); break;
    default: static_cast<uint16_t*>(p)[i] = fp32_to_bf16(v); break;
  }
}

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(int world, std::chrono::milliseconds timeout)
      : world_(world), barrier_(world, timeout), slots_(world) {}

  int world() const override { return world_; }
  const char* name() const override { return "host"; }

  void all_reduce_sum(int rank, Tensor& x, void* /*stream*/) override {
    check_rank(rank);
    VI_CHECK(x.device() == Device::CPU && (x.dtype() == DType::F32 || x.dtype() == DType::F16 || x.dtype() == DType::BF16),
             "all_reduce_sum: {} {} on {} (host f32, f16 or bf16 tensors only)", x.shape_str(), dtype_name(x.dtype()),
             device_name(x.device()));
    slots_[rank] = {&x, nullptr, Meta::of(&x), {}};
    barrier_.wait(rank);
    // Every rank must have brought the same tensor shape: checked by each rank against rank 0,
    // so that all of them throw together. Only the copied Meta is read here: a rank that throws
    // frees its tensor, which the others must not be reading.
    const Meta& x0 = slots_[0].in_meta;
    for (int r = 1; r < world_; ++r) {
      const Meta& xr = slots_[r].in_meta;
      if (xr.numel != x0.numel || xr.dtype != x0.dtype) {
        barrier_.abort(fmt::format("all_reduce_sum: rank {} brought {}, rank 0 {}", r, xr.str(), x0.str()));
        barrier_.wait(rank);  // throws
      }
    }
    // Reduce-scatter: this rank sums its slice over all ranks, in rank order, into its own x.
    const Range mine = split_slice(x.numel(), rank);
    const DType t = x.dtype();
    for (int64_t i = mine.begin; i < mine.end; ++i) {
      float s = load(t, slots_[0].in->data(), i);  // not 0 + ...: -0 + -0 must stay -0
      for (int r = 1; r < world_; ++r) s += load(t, slots_[r].in->data(), i);
      store(t, x.data(), i, s);
    }
    barrier_.wait(rank);
    // All-gather: the other slices from the ranks that summed them.
    const size_t es = dtype_info(t).block_bytes;
    for (int r = 0; r < world_; ++r) {
      if (r == rank) continue;
      const Range s = split_slice(x.numel(), r);
      std::memcpy(static_cast<char*>(x.data()) + s.begin * es, static_cast<const char*>(slots_[r].in->data()) + s.begin * es,
                  static_cast<size_t>(s.size()) * es);
    }
    barrier_.wait(rank);  // nobody's x changes before every rank has read from it
  }

  void all_gather_cols(int rank, const Tensor& part, Tensor* out, void* /*stream*/) override {
    check_rank(rank);
    VI_CHECK(part.device() == Device::CPU && part.ndim() == 2 && dtype_info(part.dtype()).block_elems == 1,
             "all_gather_cols: {} {} (host 2-D tensors of a plain dtype only)", part.shape_str(), dtype_name(part.dtype()));
    slots_[rank] = {&part, out, Meta::of(&part), Meta::of(out)};
    barrier_.wait(rank);
    // As in all_reduce_sum, the checks read only the copied Metas, and every rank checks every
    // rank's part and out, so that all of them throw together and none reads a part that its
    // rank has already freed.
    int64_t cols = 0;
    for (int r = 0; r < world_; ++r) {
      const Meta& p = slots_[r].in_meta;
      if (p.rows != part.rows() || p.dtype != part.dtype()) {
        barrier_.abort(fmt::format("all_gather_cols: rank {} brought {}, rank {} {}", r, p.str(), rank,
                                   slots_[rank].in_meta.str()));
        barrier_.wait(rank);  // throws
      }
      cols += p.cols;
    }
    for (int r = 0; r < world_; ++r) {
      const Meta& o = slots_[r].out_meta;
      if (o.present && (o.device != Device::CPU || o.ndim != 2 || o.rows != part.rows() || o.cols != cols ||
                        o.dtype != part.dtype())) {
        barrier_.abort(fmt::format("all_gather_cols: rank {} wants the parts in {}, they make [{}, {}] {}", r,
                                   o.str(), part.rows(), cols, dtype_name(part.dtype())));
        barrier_.wait(rank);  // throws
      }
    }
    if (out != nullptr) {
      const size_t es = dtype_info(part.dtype()).block_bytes;
      int64_t c0 = 0;
      for (int r = 0; r < world_; ++r) {
        const Tensor& p = *slots_[r].in;
        for (int64_t i = 0; i < p.rows(); ++i)
          std::memcpy(out->row<char>(i) + c0 * es, p.row<const char>(i), static_cast<size_t>(p.cols()) * es);
        c0 += p.cols();
      }
    }
    barrier_.wait(rank);  // nobody's part changes before every rank has read it
  }

  void abort(const std::string& why) override { barrier_.abort(why); }
  void reset() override { barrier_.reset(); }

 private:
  // What the checks compare, copied from a rank's tensor before the first barrier.
  struct Meta {
    bool present = false;
    DType dtype = DType::F32;
    Device device = Device::CPU;
    int ndim = 0;
    int64_t numel = 0, rows = 0, cols = 0;
    static Meta of(const Tensor* t) {
      if (t == nullptr) return {};
      return {true, t->dtype(), t->device(), t->ndim(), t->numel(), t->rows(), t->cols()};
    }
    std::string str() const {
      return ndim == 2 ? fmt::format("[{}, {}] {}", rows, cols, dtype_name(dtype))
                       : fmt::format("{} {} values ({}-D)", numel, dtype_name(dtype), ndim);
    }
  };
  struct Slot {
    const Tensor* in = nullptr;
    Tensor* out = nullptr;
    Meta in_meta, out_meta;
  };

  void check_rank(int rank) const {
    VI_CHECK(rank >= 0 && rank < world_, "rank {} is not one of the group's {} ranks", rank, world_);
  }
  // The slice of n values rank r sums: contiguous, in rank order; empty ones where n < world.
  Range split_slice(int64_t n, int r) const {
    const int64_t base = n / world_, extra = n % world_;
    const int64_t begin = r * base + std::min<int64_t>(r, extra);
    return {begin, begin + base + (r < extra ? 1 : 0)};
  }

  const int world_;
  Barrier barrier_;
  std::vector<Slot> slots_;  // each rank writes its own before the first barrier of a collective
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(int world, std::chrono::milliseconds timeout) {
  VI_CHECK(world >= 1 && world <= kMaxWorld, "tensor parallel over {} ranks: 1 to {} are supported", world, kMaxWorld);
  VI_CHECK(timeout.count() > 0, "a collective's timeout must be positive, not {} ms", timeout.count());
  return std::make_unique<HostCommunicator>(world, timeout);
}

}  // namespace vi::parallel
