// One thread per rank of a tensor-parallel group, kept for the group's life (DESIGN.md: one
// process, one thread per rank). run(fn) calls fn(rank) on every rank at once, rank 0 on the
// caller's thread, and returns when every rank has returned.
//
// A rank that throws aborts the communicator, so the ranks waiting for it in a collective leave
// with errors instead of hanging; once every rank has stopped, the communicator is reset and the
// first error (the cause, not the aborts it set off) is rethrown on the caller's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/communicator.h"

namespace vi::parallel {

class RankThreads {
 public:
  RankThreads(int world, Communicator* comm);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world() const { return world_; }
  // Callers from several threads take turns (a model's passes and its draft head's passes are
  // serialised by different locks); fn must not call run.
  void run(const std::function<void(int rank)>& fn);

 private:
  void worker(int rank);
  void run_rank(int rank);

  const int world_;
  Communicator* comm_;
  std::vector<std::thread> threads_;  // ranks 1 .. world-1
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  uint64_t generation_ = 0;
  int running_ = 0;  // worker ranks still in the current job
  bool stop_ = false;
  const std::function<void(int)>* job_ = nullptr;
  std::exception_ptr first_error_;
};

}  // namespace vi::parallel
