// Per-kernel table of decode rounds from a kernel trace (the GPU's own start and end time of
// every kernel, e.g. CUPTI activity records; backends/cuda/kernel_trace.h), as opposed to the
// op profiler's events, which add host work and inflate the small ops.
//
// How time is charged: within a round, kernels are taken in start order and each is charged the
// time from the latest end of the kernels before it to its own end (the launch gap or wait before
// it plus the part of its run that overlaps nothing earlier). The charges add up to the round's
// device span (first start to last end), so "share of round" means what it says, also when
// programmatic dependent launch lets a kernel start before the previous one ends.
//
// Which op a kernel belongs to: one round run op by op under an OpProfiler gives every kernel the
// index of the op call that launched it (the "labelled" round). When the traced rounds launch
// the same kernel names in the same order (a recorded step replays the ops it recorded), the
// labels carry over by position; otherwise rows are kernel names only, and the table says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/profiler.h"

namespace vi::ops {

struct KernelSpan {
  std::string name;               // kernel name as the table shows it
  uint64_t start_ns = 0, end_ns = 0;
  int64_t call = -1;              // labelled round: index of the op call in OpProfiler's round; -1 none
};

struct KernelTimeline {
  struct Row {
    std::string op, dtype, shape;  // the op call class; op "(kernel)" when unlabelled
    std::string kernels;           // distinct kernel names of the row, in first-launch order
    std::vector<std::string> kernel_names;  // the same names, one by one
    std::vector<double> kernel_us;          // charged µs per round of each, in that order
    double launches = 0;           // kernels per round
    double us = 0;                 // charged µs per round
    double gap_us = 0;             // of which no kernel ran (launch gaps, waits)
    double own_us = 0;             // Σ (end - start) per round: overlapping runs counted in full
    double bytes = 0;              // per round, from the op calls (0 when unlabelled)
  };
  int rounds = 0;
  double span_us = 0;              // mean device span of a round
  double busy_us = 0;              // mean time with at least one kernel running
  double kernels = 0;              // mean kernels per round
  bool labelled = false;           // rows carry op labels and bytes
  std::string note;                // why not labelled, when not
  std::vector<Row> rows;           // by charged time, largest first
};

// rounds: each traced round's kernels, in any order (empty rounds are skipped); labelled: the
// kernels of one op-by-op round with their call indices; calls: that round's op calls
// (OpProfiler::round_calls()). labelled and calls may be empty (rows by kernel name).
KernelTimeline build_kernel_timeline(std::vector<std::vector<KernelSpan>> rounds, std::vector<KernelSpan> labelled,
                                     const std::vector<OpCall>& calls);

// Markdown table: op, dtype, shape, kernels, launches, µs, gap µs, MB, GB/s, share; then the
// totals (span, busy, idle). A row of several kernels gives each one's µs in the kernels column
// (e.g. an attention kernel and its combine).
std::string kernel_timeline_markdown(const KernelTimeline& t);

// "void vi::cuda::(anonymous namespace)::gemv_kernel<2, 4>(float const*, int)" ->
// "gemv_kernel<2, 4>": no return type, namespaces or parameter list (template arguments kept).
std::string short_kernel_name(const std::string& demangled);

}  // namespace vi::ops
