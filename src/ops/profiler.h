// Per-op profiler: when ops::Context::profiler is set, every op entry point records one
// call (op, dtype, shape class, estimated bytes moved) between two backend timestamps —
// CUDA events on the call's stream, the wall clock on the CPU — and the profiler adds them
// up per decode round, next to the round's wall time. What is not here: the timestamp
// implementations (each backend registers its TimerFns, like ops::memory_fns) and the
// tables a tool prints (built from summary()).
#pragma once

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace vi::ops {

// One op call as its entry point describes it. Built only while profiling.
struct OpCall {
  const char* op = "";
  // The dtype that picks the kernel: weights (matmul, embedding), K/V (attention), else the
  // activations.
  DType dtype = DType::F32;
  double bytes = 0;   // estimate: weights + activations read and written, KV and state reads
  std::string shape;  // shape class, e.g. "17408x5120 T=1": calls with one class are summed
  double flops = 0;   // useful floating-point operations (matmul, attention, delta rule; else 0)
};

// Timestamps ("marks") a backend records in the order of its work. elapsed_us is read
// only after the context was synchronized.
struct TimerFns {
  void* (*create)() = nullptr;
  void (*destroy)(void* mark) = nullptr;
  void (*record)(const Context& ctx, void* mark) = nullptr;
  double (*elapsed_us)(void* from, void* to) = nullptr;
};
// One entry per device; the CPU's is built in (steady clock), backends fill theirs.
TimerFns& timer_fns(Device d);

class OpProfiler {
 public:
  // Per-round means over the rounds recorded since the last reset().
  struct Row {
    std::string op, dtype, shape;
    double calls = 0, us = 0, bytes = 0, flops = 0;
  };
  struct Summary {
    int rounds = 0;
    double wall_us = 0;    // host wall clock of a round, forward call to synchronised end
    double device_us = 0;  // first to last mark of a round on the device
    double op_us = 0;      // sum of the op times
    double bytes = 0, flops = 0;  // sums over the ops
    std::vector<Row> rows;  // by time, largest first
  };

  // timed = false only counts calls, bytes and FLOPs (no marks, no synchronisation cost
  // beyond end_round's).
  explicit OpProfiler(Device d, bool timed = true);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // A round is one forward pass; calls outside a round are not recorded. end_round
  // synchronises ctx, reads the marks and adds the round to the totals.
  void begin_round(const Context& ctx);
  void end_round(const Context& ctx);
  void reset();
  Summary summary() const;
  // Markdown table of summary(): op, dtype, shape, calls, µs, bytes, GB/s, share; and the
  // gap between the op times and the round's wall time.
  std::string markdown() const;

  // For OpScope: a slot of the call, or -1 when not recorded (nested call, no round open).
  int enter(const Context& ctx, OpCall&& call);
  void leave(const Context& ctx, int slot);

  // Called around every recorded (outermost) op call while set, after its entry mark and
  // before its exit mark: a kernel tracer tags the kernels launched in between with the
  // call's index in round_calls() (ops/kernel_timeline.h).
  struct CallHooks {
    void (*enter)(void* user, int64_t call) = nullptr;
    void (*leave)(void* user) = nullptr;
    void* user = nullptr;
  };
  void set_call_hooks(const CallHooks& h) { hooks_ = h; }
  // The calls of the round in progress, or of the last one ended.
  const std::vector<OpCall>& round_calls() const { return calls_; }

 private:
  void* mark(size_t i);

  Device device_;
  bool timed_;
  TimerFns fns_;
  std::vector<void*> marks_;    // reused from round to round
  std::vector<OpCall> calls_;   // this round's calls; call i spans marks 2i+1 .. 2i+2
  bool in_round_ = false;
  // The ranks of a tensor-parallel group share the caller's profiler: enter and leave may come
  // from several threads (each thread's nesting of entry points is its own: profiler.cpp).
  std::mutex mu_;
  CallHooks hooks_;
  double round_t0_us_ = 0;
  struct Total {
    std::string op, dtype, shape;
    double calls = 0, us = 0, bytes = 0, flops = 0;
  };
  std::map<std::string, Total> totals_;
  int rounds_ = 0;
  double wall_us_ = 0, device_us_ = 0, op_us_ = 0;
};

// Times the enclosing scope of an op entry point (see VI_OP_SCOPE).
class OpScope {
 public:
  OpScope(const Context& ctx, OpCall&& call) : ctx_(ctx), slot_(ctx.profiler->enter(ctx, std::move(call))) {}
  explicit OpScope(const Context& ctx) : ctx_(ctx), slot_(-2) {}
  ~OpScope() {
    if (slot_ != -2) ctx_.profiler->leave(ctx_, slot_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const Context& ctx_;
  int slot_;
};

}  // namespace vi::ops

// One line in each op entry point, right before its kernel is called:
//   VI_OP_SCOPE(ctx, "rms_norm", x.dtype(), x.nbytes() + w.nbytes() + y.nbytes(), "{}x{}", x.rows(), x.cols());
// VI_OP_SCOPE_F adds the call's FLOPs after the bytes. Bytes, FLOPs and the shape string
// are evaluated only when ctx.profiler is set.
#define VI_OP_SCOPE_F(ctx, op, dtype, bytes, flops, ...)                                              \
  ::vi::ops::OpScope vi_op_scope_ =                                                                   \
      (ctx).profiler ? ::vi::ops::OpScope((ctx), ::vi::ops::OpCall{(op), (dtype), static_cast<double>(bytes), \
                                                                   fmt::format(__VA_ARGS__),          \
                                                                   static_cast<double>(flops)})       \
                     : ::vi::ops::OpScope(ctx)
#define VI_OP_SCOPE(ctx, op, dtype, bytes, ...) VI_OP_SCOPE_F(ctx, op, dtype, bytes, 0, __VA_ARGS__)
