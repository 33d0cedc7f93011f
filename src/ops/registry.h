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

class OpProfiler;

// Which family of GPU kernels runs: `volta` keeps to what sm_70 has (mma.m8n8k4 / WMMA,
// no cp.async, ldmatrix or bf16, 96 KB shared memory), so Volta code can be tested on any
// newer GPU; `native` may use sm_80+ features and cuBLAS. kAuto: chosen from the device.
enum class KernelProfile : uint8_t { kAuto, kVolta, kNative };

// Per-call execution context: which device runs the op and its resources.
struct Context {
  Device device = Device::CPU;
  ThreadPool* pool = nullptr;  // CPU backend: the worker pool (null: ThreadPool::global())
  void* stream = nullptr;      // CUDA backend: cudaStream_t
  // dtype of the activations models allocate on this device: f32 on the CPU (the fp32
  // reference), f16 on GPUs (Volta has fp16 tensor cores only; fp32 accumulation inside).
  DType act = DType::F32;
  KernelProfile profile = KernelProfile::kAuto;  // CUDA backend only
  OpProfiler* profiler = nullptr;  // times every op entry point (ops/profiler.h); null: off
  bool graphs = true;  // models may record small steps once and replay them (ops/graph.h)
  // The projections a norm feeds may multiply int8 activations (one scale per 256 values) where
  // a device has such a GEMV (CUDA native: Q4_K -> Q4_KI, ops/prepare_matmul_weight.h): faster,
  // but the logits move ~17x further from exact than with f16 (docs/PERFORMANCE.md). Off: f16 throughout.
  bool int8_act = false;
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
