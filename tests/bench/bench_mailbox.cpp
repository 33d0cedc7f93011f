// What one all-reduce of the mailbox communicator costs (src/parallel/cuda): ranks are threads with
// streams of their own on one GPU (device or pinned host mailbox), each queues N all-reduces of the
// same tensor back to back, and the time is the wall clock from the first queued to the last
// finished on every rank, over N. Sizes: a decode step's residual row of the 27B shape (5120 f16),
// a 4-token verify round's (4 x 5120), and a 2048-token prefill chunk's (2048 x 5120 f16: several
// rounds of the 8 MiB slot). One GPU's ranks share its SMs and memory, so this is the protocol's
// cost (flags, fences, a kernel a collective), not a link's bandwidth.
//
//   bench_mailbox [--ranks 2,3,4] [--n 2000]
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "parallel/mailbox_communicator.h"
#include "parallel/rank_threads.h"

namespace {

using vi::DType;
using vi::Tensor;
using namespace vi::parallel;

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

// Seconds per all-reduce of `numel` f16 values over `world` ranks (median of 3 runs of n).
double time_all_reduce(MailboxPlace place, int world, int64_t numel, int n) {
  MailboxOptions opt;
  opt.place = place;
  auto comm = make_mailbox_communicator(std::vector<int>(world, 0), opt);
  RankThreads threads(world, comm.get());
  std::vector<cudaStream_t> streams(world);
  std::vector<void*> bufs(world);
  for (int r = 0; r < world; ++r) {
    cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    cudaMalloc(&bufs[r], numel * 2);
    cudaMemset(bufs[r], 0, numel * 2);
  }
  cudaDeviceSynchronize();
  std::vector<double> runs;
  for (int rep = 0; rep < 4; ++rep) {  // the first is a warm-up
    const auto t0 = std::chrono::steady_clock::now();
    threads.run([&](int r) {
      Tensor x = Tensor::view(DType::F16, {numel}, bufs[r], nullptr, vi::Device::CUDA);
      for (int i = 0; i < n; ++i) comm->all_reduce_sum(r, x, streams[r]);
      cudaStreamSynchronize(streams[r]);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    comm->check();
    if (rep > 0) runs.push_back(s / n);
  }
  for (int r = 0; r < world; ++r) {
    cudaFree(bufs[r]);
    cudaStreamDestroy(streams[r]);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 3, 4};
  int n = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ranks") == 0) ranks = parse_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--n") == 0) n = std::atoi(argv[i + 1]);
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("mailbox all-reduce on one %s, f16, every rank a thread and a stream; us per all-reduce (median of 3 "
              "runs of %d)\n",
              prop.name, n);
  std::printf("| mailbox | ranks | 5120 | 4 x 5120 | 2048 x 5120 |\n| --- | --- | --- | --- | --- |\n");
  for (MailboxPlace place : {MailboxPlace::kDevice, MailboxPlace::kHost})
    for (int world : ranks) {
      std::string row = fmt::format("| {} | {} |", mailbox_place_name(place), world);
      for (int64_t numel : {int64_t{5120}, int64_t{4 * 5120}, int64_t{2048 * 5120}}) {
        const int reps = numel > 100000 ? std::max(1, n / 100) : n;
        row += fmt::format(" {:.1f} |", 1e6 * time_all_reduce(place, world, numel, reps));
      }
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
    }
  return 0;
}
