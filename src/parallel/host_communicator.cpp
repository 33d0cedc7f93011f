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
#include "parallel/barrier.h"
#include "parallel/communicator.h"
#include "parallel/shard_plan.h"

namespace vi::parallel {

namespace {

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
  HostBarrier barrier_;
  std::vector<Slot> slots_;  // each rank writes its own before the first barrier of a collective
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(int world, std::chrono::milliseconds timeout) {
  VI_CHECK(world >= 1 && world <= kMaxWorld, "tensor parallel over {} ranks: 1 to {} are supported", world, kMaxWorld);
  VI_CHECK(timeout.count() > 0, "a collective's timeout must be positive, not {} ms", timeout.count());
  return std::make_unique<HostCommunicator>(world, timeout);
}

}  // namespace vi::parallel
