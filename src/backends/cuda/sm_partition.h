// Running the recorded work (CUDA graphs: decode and verify rounds, the benchmarks' timed calls)
// on a subset of the card's SMs, for benchmarks that emulate a card with more memory bandwidth
// per SM on the one at hand.
//
// Why: a decode GEMV must keep bandwidth x latency / SMs bytes in flight on each SM, and issue its
// instructions at the matching rate, to reach the copy rate. An H200 asks 4.2 TB/s of 132 SMs at
// about an H100's clock and load latency; an H100 (3.0 TB/s) running on 94 of its 132 SMs asks the
// same of each (3.0 / 94 ~ 4.2 / 132 TB/s). DRAM still feeds that many SMs at its full rate
// (docs/notes/gemv.md run 32: 56 SMs of an H200 read 4.4 TB/s), so what a kernel loses this way is
// what it would lose to the faster memory. It is a proxy, not that card: kernels whose time is
// latency spread over every SM (small steps, attention at short context) lose more here, on fewer
// SMs, than on a card with more bandwidth and all of them.
//
// How: a green context (CUDA 12.4+ driver and runtime) is a hardware partition of the SMs; work on
// one of its streams runs on its SMs only. Once restrict_graphs_to_sms(n) ran, graphs are recorded
// on such a stream (backends/cuda/graph.cu) and replayed there, fenced by events to the caller's
// stream both ways, and the device's usable SM count is the partition's, so the kernels size
// their grids (and decode attention its splits) for it. Work launched outside graphs still runs on
// every SM. (A first form held SMs with blocks that only waited, from another stream: every kernel
// beside them took 0.1-0.2 ms longer on an H100, 2026-12-06 22:16, and the rounds ten times as
// long; a partition needs nothing running beside the work.)
#pragma once

#include <string>

namespace vi::cuda {

// Whether this build and the driver can partition the current device's SMs; `why` (if not null)
// says why not.
bool sm_partition_supported(std::string* why = nullptr);

// From now on, graphs recorded on each device run on `sms` of its SMs, rounded up to the partition
// granularity of the card (a multiple of 8 on sm_90; exact where the driver can ignore the SMs'
// grouping into clusters). Returns the partition's SM count (the same on every device, or it
// throws). Once per process: graphs recorded before run on every SM, and it cannot be undone
// (graphs recorded after keep using the partition). Throws where unsupported, for sms
// outside 1..a device's SMs, or if a device already has a different partition.
int restrict_graphs_to_sms(int sms);

// The current device's partition: its SM count (0: none), and the calling thread's stream of it
// (a cudaStream_t, made on first use; null: no partition). Each thread records and replays on its
// own stream, so threads may record at once.
int partition_sms();
void* partition_stream();

}  // namespace vi::cuda
