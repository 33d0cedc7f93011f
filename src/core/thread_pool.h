// A fixed pool of worker threads for data-parallel loops on the CPU backend.
//
// Decode issues a few hundred small loops per token, so two things matter: waking the
// workers must be cheap (they spin briefly on a generation counter before sleeping), and
// a worker the OS has not scheduled yet must not hold the loop up. Work is therefore cut
// into chunks that participants *claim* from a shared counter; the calling thread claims
// too, so on a busy machine it simply runs the chunks nobody else picked up, and it only
// ever waits for chunks that are already running.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vi {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, chunk_index) over [0, n) cut into contiguous chunks of at least
  // `grain` items (at most a few per thread), each exactly once, on any participating
  // thread; returns when all are done. Not reentrant: fn must not call parallel_for on
  // the same pool. Only one thread may call parallel_for on a pool at a time.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

  // A process-wide pool sized by set_default_threads() (default: hardware threads).
  static ThreadPool& global();
  static void set_default_threads(int n);

 private:
  void worker();
  // Claims and runs chunks of job `gen` until none is left.
  void run_chunks(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Current job: the generation in the high 32 bits, the next unclaimed chunk in the low
  // 32. A claim is a CAS that keeps the generation, so a worker that wakes late for an
  // old job can never take a chunk of a newer one.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  // Job description, written before claim_ is published and read only by a thread that
  // holds a claim (so the caller cannot have moved on to the next job).
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  // Read before a claim (to see whether any chunk is left), hence atomic; a stale value
  // is harmless because the claim's CAS fails once the generation has moved on.
  std::atomic<uint32_t> job_chunks_{0};
};

}  // namespace vi
