// A fixed pool of worker threads for data-parallel loops on the CPU backend.
// Decode issues hundreds of small loops per token, so workers spin briefly on a
// generation counter before sleeping: a wake-up through a condition variable alone
// costs tens of microseconds each time.
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

  // Calls fn(begin, end, thread_index) over [0, n) split into contiguous chunks of at
  // least `grain` items, one chunk per thread; returns when all are done. The calling
  // thread takes part. Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

  // A process-wide pool sized by set_default_threads() (default: hardware threads).
  static ThreadPool& global();
  static void set_default_threads(int n);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
};

}  // namespace vi
