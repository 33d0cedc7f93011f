#include "ops/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "ops/memory.h"

namespace vi::ops {

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU marks: the op ran synchronously, so the wall clock at the mark is the device time.
void* cpu_create() { return new double(0); }
void cpu_destroy(void* m) { delete static_cast<double*>(m); }
void cpu_record(const Context&, void* m) { *static_cast<double*>(m) = now_us(); }
double cpu_elapsed(void* a, void* b) { return *static_cast<double*>(b) - *static_cast<double*>(a); }

}  // namespace

TimerFns& timer_fns(Device d) {
  static std::array<TimerFns, kNumDevices> fns = [] {
    std::array<TimerFns, kNumDevices> f{};
    f[static_cast<size_t>(Device::CPU)] = {cpu_create, cpu_destroy, cpu_record, cpu_elapsed};
    return f;
  }();
  return fns[static_cast<size_t>(d)];
}

OpProfiler::OpProfiler(Device d, bool timed) : device_(d), timed_(timed), fns_(timer_fns(d)) {
  VI_CHECK(!timed || (fns_.create && fns_.record && fns_.elapsed_us),
           "op profiler: no {} timer is built into this binary", device_name(d));
}

OpProfiler::~OpProfiler() {
  for (void* m : marks_) fns_.destroy(m);
}

namespace {
// Nesting of op entry points on this thread (an op calling ops is recorded once).
thread_local int t_depth = 0;
}  // namespace

void* OpProfiler::mark(size_t i) {
  while (marks_.size() <= i) marks_.push_back(fns_.create());
  return marks_[i];
}

void OpProfiler::begin_round(const Context& ctx) {
  VI_CHECK(!in_round_, "op profiler: begin_round twice without end_round");
  VI_CHECK(ctx.device == device_, "op profiler: made for {}, used on {}", device_name(device_),
           device_name(ctx.device));
  // Work queued before the round must not count as the round's.
  Context c = ctx;
  synchronize(c);
  calls_.clear();
  in_round_ = true;
  round_t0_us_ = now_us();
  if (timed_) fns_.record(ctx, mark(0));
}

int OpProfiler::enter(const Context& ctx, OpCall&& call) {
  if (t_depth++ > 0 || !in_round_) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t slot = calls_.size();
  calls_.push_back(std::move(call));
  if (timed_) fns_.record(ctx, mark(2 * slot + 1));
  if (hooks_.enter) hooks_.enter(hooks_.user, static_cast<int64_t>(slot));
  return static_cast<int>(slot);
}

void OpProfiler::leave(const Context& ctx, int slot) {
  --t_depth;
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (hooks_.leave) hooks_.leave(hooks_.user);
  if (timed_) fns_.record(ctx, mark(2 * static_cast<size_t>(slot) + 2));
}

void OpProfiler::end_round(const Context& ctx) {
  VI_CHECK(in_round_, "op profiler: end_round without begin_round");
  const size_t last = 2 * calls_.size() + 1;
  if (timed_) fns_.record(ctx, mark(last));
  Context c = ctx;
  synchronize(c);
  const double wall = now_us() - round_t0_us_;
  in_round_ = false;
  double op_sum = 0;
  for (size_t i = 0; i < calls_.size(); ++i) {
    OpCall& call = calls_[i];
    const double us = timed_ ? fns_.elapsed_us(mark(2 * i + 1), mark(2 * i + 2)) : 0.0;
    const std::string dt = dtype_name(call.dtype);
    Total& t = totals_[std::string(call.op) + '\x1f' + dt + '\x1f' + call.shape];
    if (t.calls == 0) t.op = call.op, t.dtype = dt, t.shape = call.shape;
    t.calls += 1;
    t.us += us;
    t.bytes += call.bytes;
    t.flops += call.flops;
    op_sum += us;
  }
  if (timed_) device_us_ += fns_.elapsed_us(mark(0), mark(last));
  wall_us_ += wall;
  op_us_ += op_sum;
  ++rounds_;
}

void OpProfiler::reset() {
  VI_CHECK(!in_round_, "op profiler: reset inside a round");
  totals_.clear();
  rounds_ = 0;
  wall_us_ = device_us_ = op_us_ = 0;
}

OpProfiler::Summary OpProfiler::summary() const {
  Summary s;
  s.rounds = rounds_;
  if (rounds_ == 0) return s;
  const double r = rounds_;
  s.wall_us = wall_us_ / r;
  s.device_us = device_us_ / r;
  s.op_us = op_us_ / r;
  for (const auto& [key, t] : totals_) {
    s.rows.push_back({t.op, t.dtype, t.shape, t.calls / r, t.us / r, t.bytes / r, t.flops / r});
    s.bytes += t.bytes / r;
    s.flops += t.flops / r;
  }
  std::sort(s.rows.begin(), s.rows.end(),
            [](const Row& a, const Row& b) { return a.us != b.us ? a.us > b.us : a.bytes > b.bytes; });
  return s;
}

std::string OpProfiler::markdown() const {
  const Summary s = summary();
  if (s.rounds == 0) return "(no rounds profiled)\n";
  std::string out =
      "| op | dtype | shape | calls | µs/round | MB/round | GB/s | share of round |\n"
      "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
  double bytes = 0;
  for (const Row& row : s.rows) {
    bytes += row.bytes;
    out += fmt::format("| {} | {} | {} | {:.0f} | {:.1f} | {:.2f} | {:.0f} | {:.1f}% |\n", row.op, row.dtype, row.shape,
                       row.calls, row.us, row.bytes / 1e6, row.us > 0 ? row.bytes / row.us / 1e3 : 0.0,
                       100.0 * row.us / s.wall_us);
  }
  out += fmt::format("| **all ops** | | | | {:.1f} | {:.2f} | {:.0f} | {:.1f}% |\n", s.op_us, bytes / 1e6,
                     s.op_us > 0 ? bytes / s.op_us / 1e3 : 0.0, 100.0 * s.op_us / s.wall_us);
  out += fmt::format("| **gap** (launch gaps, host work) | | | | {:.1f} | | | {:.1f}% |\n", s.wall_us - s.op_us,
                     100.0 * (s.wall_us - s.op_us) / s.wall_us);
  out += fmt::format("\n{} rounds; round wall time {:.1f} µs (device span {:.1f} µs); bytes are estimates from "
                     "the tensors each op reads and writes.\n",
                     s.rounds, s.wall_us, s.device_us);
  return out;
}

}  // namespace vi::ops
