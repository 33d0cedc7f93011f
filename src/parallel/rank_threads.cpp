#include "parallel/rank_threads.h"

#include "core/error.h"

namespace vi::parallel {

RankThreads::RankThreads(int world, Communicator* comm) : world_(world), comm_(comm) {
  VI_CHECK(world >= 1 && (world == 1 || (comm != nullptr && comm->world() == world)),
           "rank threads for {} ranks need a communicator of as many", world);
  for (int r = 1; r < world_; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run_rank(int rank) {
  try {
    (*job_)(rank);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    // The first error is the cause; the others are the collectives it aborted.
    if (!first_error_) {
      first_error_ = std::current_exception();
      std::string why = fmt::format("rank {} failed", rank);
      try {
        throw;
      } catch (const std::exception& e) {
        why += fmt::format(": {}", e.what());
      } catch (...) {
      }
      if (comm_ != nullptr) comm_->abort(why);
    }
  }
}

void RankThreads::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_rank(rank);
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) done_cv_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& fn) {
  std::lock_guard<std::mutex> turn(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    first_error_ = nullptr;
    running_ = world_ - 1;
    ++generation_;
  }
  cv_.notify_all();
  run_rank(0);
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return running_ == 0; });
    err = first_error_;
    job_ = nullptr;
  }
  if (err) {
    if (comm_ != nullptr) comm_->reset();
    std::rethrow_exception(err);
  }
}

}  // namespace vi::parallel
