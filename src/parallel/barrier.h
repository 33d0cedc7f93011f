// A reusable host barrier of a group's ranks (threads of one process), with a deadline and an
// abort that wakes every waiter: the host communicator's collectives meet at it, and the mailbox
// communicator paces the host threads of ranks that share one GPU with it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace vi::parallel {

// A reusable barrier of `world` ranks with a deadline and an abort that wakes every waiter.
class HostBarrier {
 public:
  HostBarrier(int world, std::chrono::milliseconds timeout)
      : world_(world),
        timeout_(timeout),
        spin_(static_cast<unsigned>(world) <= std::max(1u, std::thread::hardware_concurrency())),
        here_(world, false) {}

  // Returns once every rank has arrived; throws vi::Error when the group is (or gets) aborted,
  // or when the others do not all arrive within the timeout (which aborts the group, naming them).
  void wait(int rank) {
    uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      throw_if_aborted();
      here_[rank] = true;
      if (++arrived_ == world_) {
        arrived_ = 0;
        std::fill(here_.begin(), here_.end(), false);
        generation_.fetch_add(1, std::memory_order_release);
        cv_.notify_all();
        return;
      }
      gen = generation_.load(std::memory_order_relaxed);
    }
    // The ranks of one pass arrive within microseconds of each other, and a sleep and wake-up
    // costs tens of them (a decode step has a few hundred barriers): look for a while first —
    // unless the ranks outnumber the hardware threads, where a looking rank takes the core a late
    // one needs (3 ranks on 2 cores: 20.7 ms a SmolLM2 step with the look, see
    // docs/notes/tensor_parallel.md). The acquire pairs with the last rank's release, which came
    // after every rank's writes.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_ ? 50 : 0);
    for (int i = 1; spin_; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      if (aborting_.load(std::memory_order_relaxed)) break;
      if (i % 64 == 0 && std::chrono::steady_clock::now() > spin_until) break;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_.load() != gen || !aborted_.empty(); });
    if (generation_.load() != gen) return;
    if (done) throw_if_aborted();
    std::string late;
    for (int r = 0; r < world_; ++r)
      if (!here_[r]) late += fmt::format("{}{}", late.empty() ? "" : ", ", r);
    set_aborted(fmt::format("rank(s) {} did not reach the collective within {} ms", late, timeout_.count()));
    cv_.notify_all();
    throw_if_aborted();
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) set_aborted(why);
    cv_.notify_all();
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.clear();
    aborting_.store(false);
    arrived_ = 0;
    std::fill(here_.begin(), here_.end(), false);
    generation_.fetch_add(1);
  }

 private:
  void set_aborted(std::string why) {  // under mu_
    aborted_ = std::move(why);
    aborting_.store(true);
  }
  void throw_if_aborted() const {
    if (!aborted_.empty()) throw Error("tensor-parallel group aborted: " + aborted_);
  }

  const int world_;
  const std::chrono::milliseconds timeout_;
  const bool spin_;  // look before sleeping (wait)
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::atomic<uint64_t> generation_{0};  // rounds completed; written under mu_, read while spinning too
  std::vector<bool> here_;  // ranks waiting in the current round
  std::string aborted_;
  std::atomic<bool> aborting_{false};  // aborted_ is set: what a spinning rank can read without mu_
};

}  // namespace vi::parallel
