#include "tools/bench_trace.h"

#include <algorithm>

#ifdef VI_WITH_CUDA
#include "backends/cuda/kernel_trace.h"
#endif

namespace vi::cli {

ops::KernelTimeline trace_decode_kernels(Device device, int rounds, const std::function<void(ops::OpProfiler*)>& round,
                                         uint64_t* dropped) {
  *dropped = 0;
  ops::KernelTimeline none;
  if (device == Device::CPU) {
    none.note = "a kernel trace needs a GPU";
    return none;
  }
#ifdef VI_WITH_CUDA
  std::string why;
  auto trace = cuda::KernelTrace::start(&why);
  if (!trace) {
    none.note = why;
    return none;
  }
  ops::OpProfiler labels(device, /*timed=*/false);
  labels.set_call_hooks(trace->label_hooks());
  std::vector<uint64_t> cuts = {trace->now_ns()};
  round(&labels);
  cuts.push_back(trace->now_ns());
  for (int r = 0; r < rounds; ++r) {
    round(nullptr);
    cuts.push_back(trace->now_ns());
  }
  const std::vector<ops::KernelSpan> spans = trace->stop();
  *dropped = trace->dropped();
  // Every round ends synchronised, so its kernels start (and end) between its two cuts.
  std::vector<std::vector<ops::KernelSpan>> by_round(cuts.size() - 1);
  for (const ops::KernelSpan& k : spans) {
    const auto it = std::upper_bound(cuts.begin(), cuts.end(), k.start_ns);
    if (it == cuts.begin() || it == cuts.end()) continue;  // outside the traced rounds
    by_round[static_cast<size_t>(it - cuts.begin() - 1)].push_back(k);
  }
  std::vector<ops::KernelSpan> labelled = std::move(by_round.front());
  by_round.erase(by_round.begin());
  return ops::build_kernel_timeline(std::move(by_round), std::move(labelled), labels.round_calls());
#else
  (void)rounds;
  (void)round;
  none.note = "this binary was built without CUDA";
  return none;
#endif
}

}  // namespace vi::cli
