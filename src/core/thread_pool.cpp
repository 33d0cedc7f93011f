#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vi {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
int g_default_threads = 0;
constexpr int kChunksPerThread = 4;  // some slack so a slow thread does not set the pace
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t gen) {
  for (;;) {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(v >> 32) != gen) return;  // a newer job: ours is finished
      uint32_t next = static_cast<uint32_t>(v);
      if (next >= job_chunks_.load(std::memory_order_acquire)) return;
      if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    }
    // We hold chunk `c` of job `gen`: the caller waits for it, so the job fields are valid.
    const uint32_t c = static_cast<uint32_t>(v);
    const int64_t chunks = job_chunks_.load(std::memory_order_relaxed);
    const int64_t begin = job_n_ * c / chunks;
    const int64_t end = job_n_ * (c + 1) / chunks;
    (*job_)(begin, end, static_cast<int>(c));
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker() {
  uint32_t seen = 0;
  for (;;) {
    // Spin a little: the next loop of a decode step usually follows within microseconds.
    uint32_t gen = static_cast<uint32_t>(claim_.load(std::memory_order_acquire) >> 32);
    for (int spin = 0; gen == seen && spin < 20000 && !stop_.load(std::memory_order_relaxed); ++spin) {
      cpu_relax();
      gen = static_cast<uint32_t>(claim_.load(std::memory_order_acquire) >> 32);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_.load() || static_cast<uint32_t>(claim_.load() >> 32) != seen; });
      if (stop_) return;
      gen = static_cast<uint32_t>(claim_.load() >> 32);
    }
    if (stop_) return;
    seen = gen;
    run_chunks(gen);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = static_cast<int64_t>(n_threads_) * (n_threads_ > 1 ? kChunksPerThread : 1);
  const uint32_t chunks = static_cast<uint32_t>(std::min<int64_t>(max_chunks, (n + grain - 1) / grain));
  if (chunks <= 1 || n_threads_ == 1) {
    fn(0, n, 0);
    return;
  }
  // Close the previous generation first: a worker still in run_chunks() for it could
  // otherwise read the new job_chunks_ below, claim a chunk past the old job's end, run
  // it with the new job's fields and bump done_ past `chunks` (the wait below then never
  // ends). After the exchange no claim on the old generation can succeed; a worker that
  // sees the new job_chunks_ (acquire) also sees the closed claim word.
  const uint64_t old = claim_.fetch_or(0xffffffffull, std::memory_order_acq_rel);
  // Publish the job. Workers read job_* only after a successful claim of the new
  // generation, and the release store of claim_ orders these writes before it.
  job_ = &fn;
  job_n_ = n;
  job_chunks_.store(chunks, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = static_cast<uint32_t>(old >> 32) + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);  // pairs with the sleeping workers' predicate
    claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(gen);
  while (done_.load(std::memory_order_acquire) != static_cast<int>(chunks)) cpu_relax();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_default_threads);
  return pool;
}

void ThreadPool::set_default_threads(int n) { g_default_threads = n; }

}  // namespace vi
