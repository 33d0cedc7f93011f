// The op registry: (op, device, dtype) -> kernel function.
// Each op in ops/ owns one OpTable of its own function type. Backends fill the tables
// at start-up (backends/register.h); a call with no matching entry fails loudly with the
// op, device and dtype named, never a silent slow path.
#pragma once

#include <array>
#include <cstddef>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace vi {
class ThreadPool;
}

namespace vi::ops {

// Per-call execution context: which device runs the op and its resources.
struct Context {
  Device device = Device::CPU;
  ThreadPool* pool = nullptr;  // CPU backend: the worker pool (null: ThreadPool::global())
  void* stream = nullptr;      // CUDA backend: cudaStream_t
};

constexpr size_t kNumDevices = 2;

template <class Fn>
class OpTable {
 public:
  explicit OpTable(const char* op) : op_(op) {}

  void add(Device d, DType t, Fn fn) { fns_[idx(d)][static_cast<size_t>(t)] = fn; }
  bool supports(Device d, DType t) const { return fns_[idx(d)][static_cast<size_t>(t)] != nullptr; }
  Fn get(Device d, DType t) const {
    Fn fn = fns_[idx(d)][static_cast<size_t>(t)];
    VI_CHECK(fn != nullptr, "op '{}' has no {} kernel for dtype {}", op_, device_name(d),
             dtype_name(t));
    return fn;
  }

 private:
  static size_t idx(Device d) { return static_cast<size_t>(d); }
  const char* op_;
  std::array<std::array<Fn, static_cast<size_t>(DType::kCount)>, kNumDevices> fns_{};
};

// Shape/dtype guards shared by the op entry points.
void check_same_device(const char* op, const Context& ctx, std::initializer_list<const Tensor*> ts);

}  // namespace vi::ops
