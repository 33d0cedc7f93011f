// parallel/communicator (host ranks) and parallel/rank_threads: the collectives of a
// tensor-parallel group and the failure handling around them.
//
// What matters here: every rank ends a reduction with the same bits, and those bits are the
// documented ones (an f32 sum in rank order, rounded once), so a tensor-parallel run gives the
// same tokens however the threads are scheduled; and no failure (a throwing rank, mismatched
// tensors, a rank that never arrives) leaves another rank waiting forever.
//
// The communicators below get a timeout of a minute where none is under test, so a barrier
// bug fails the test (with a "did not reach" error the checks reject) instead of hanging it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/rank_threads.h"
#include "parallel/shard_plan.h"

namespace vi::parallel {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kNoHang(60000);  // far above any wait here, even on a loaded CI machine
constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Raw bits of element i of an f32, f16 or bf16 tensor.
uint32_t bits_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::F32) return fp32_to_bits(t.ptr<float>()[i]);
  return t.ptr<uint16_t>()[i];
}

// `v` rounded to dtype t, as the bits t stores.
uint32_t to_bits(DType t, float v) {
  switch (t) {
    case DType::F32: return fp32_to_bits(v);
    case DType::F16: return fp32_to_fp16(v);
    default: return fp32_to_bf16(v);
  }
}

float from_bits(DType t, uint32_t b) {
  switch (t) {
    case DType::F32: return fp32_from_bits(b);
    case DType::F16: return fp16_to_fp32(static_cast<uint16_t>(b));
    default: return bf16_to_fp32(static_cast<uint16_t>(b));
  }
}

void store_bits(Tensor& t, int64_t i, uint32_t b) {
  if (t.dtype() == DType::F32) t.ptr<uint32_t>()[i] = b;
  else t.ptr<uint16_t>()[i] = static_cast<uint16_t>(b);
}

// n values exactly representable in t, of mixed signs and magnitudes (so the order of an f32
// sum changes its result), with some zeros of either sign.
std::vector<float> random_values(std::mt19937& rng, DType t, int64_t n) {
  // f16 stays well inside its range: a sum of 4 ranks must not overflow to inf.
  const int emin = t == DType::F16 ? -20 : -30, emax = t == DType::F16 ? 10 : 30;
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(emin, emax), coin(0, 1), kind(0, 15);
  std::vector<float> v(n);
  for (float& x : v) {
    const float sign = coin(rng) ? -1.0f : 1.0f;
    x = kind(rng) == 0 ? sign * 0.0f : sign * std::ldexp(mant(rng), expo(rng));
    x = from_bits(t, to_bits(t, x));
  }
  return v;
}

Tensor tensor_of(DType t, const std::vector<float>& v) {
  Tensor x = Tensor::empty(t, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) store_bits(x, static_cast<int64_t>(i), to_bits(t, v[i]));
  return x;
}

// The documented result: the values as f32, added in rank order starting from rank 0's value,
// rounded once to the dtype.
uint32_t reference_sum_bits(DType t, const std::vector<std::vector<float>>& in, size_t i) {
  float s = in[0][i];
  for (size_t r = 1; r < in.size(); ++r) s += in[r][i];
  return to_bits(t, s);
}

// Runs one all_reduce_sum of `in` (one vector per rank) and checks every rank's bits.
void expect_all_reduce(Communicator& comm, RankThreads& threads, DType t,
                       const std::vector<std::vector<float>>& in, const std::string& where) {
  const int world = comm.world();
  std::vector<Tensor> xs;
  for (int r = 0; r < world; ++r) xs.push_back(tensor_of(t, in[r]));
  threads.run([&](int rank) { comm.all_reduce_sum(rank, xs[rank], nullptr); });
  int bad = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < in[0].size(); ++i) {
      const uint32_t want = reference_sum_bits(t, in, i), got = bits_at(xs[r], static_cast<int64_t>(i));
      if (got != want && bad++ < 10)
        ADD_FAILURE() << where << " rank " << r << " element " << i << ": got bits 0x" << std::hex << got
                      << " want 0x" << want;
    }
  }
  EXPECT_EQ(bad, 0) << where;
}

TEST(HostCommunicator, RejectsBadGroupsAndTensors) {
  EXPECT_THROW(make_host_communicator(0), Error);
  EXPECT_THROW(make_host_communicator(kMaxWorld + 1), Error);
  EXPECT_THROW(make_host_communicator(2, milliseconds(0)), Error);
  auto comm2 = make_host_communicator(2, kNoHang);
  EXPECT_EQ(comm2->world(), 2);
  EXPECT_THROW(RankThreads(3, comm2.get()), Error);  // the thread count must match the group
  EXPECT_THROW(RankThreads(2, nullptr), Error);
  // These fail before the first barrier: no other rank is needed to see the error.
  Tensor x = Tensor::empty(DType::F32, {4});
  EXPECT_THROW(comm2->all_reduce_sum(2, x, nullptr), Error);
  EXPECT_THROW(comm2->all_reduce_sum(-1, x, nullptr), Error);
  Tensor ints = Tensor::empty(DType::I32, {4});
  EXPECT_THROW(comm2->all_reduce_sum(0, ints, nullptr), Error);
  Tensor q = Tensor::empty(DType::Q8_0, {1, 32});
  EXPECT_THROW(comm2->all_reduce_sum(0, q, nullptr), Error);
  Tensor flat = Tensor::empty(DType::F32, {4});
  EXPECT_THROW(comm2->all_gather_cols(0, flat, nullptr, nullptr), Error);  // parts are 2-D
  EXPECT_THROW(comm2->all_gather_cols(0, q, nullptr, nullptr), Error);     // of a plain dtype
}

// run(fn) calls fn exactly once per rank per run, rank 0 on the caller's thread, and can be
// called again and again (the worker threads live for the group's life).
TEST(RankThreads, RunsEveryRankOncePerRun) {
  for (int world = 1; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, world == 1 ? nullptr : comm.get());
    EXPECT_EQ(threads.world(), world);
    std::vector<std::atomic<int>> calls(world);
    std::vector<std::thread::id> ids(world);
    for (int run = 0; run < 500; ++run) {
      threads.run([&](int rank) {
        calls[rank]++;
        ids[rank] = std::this_thread::get_id();
      });
      EXPECT_EQ(ids[0], std::this_thread::get_id());
    }
    for (int r = 0; r < world; ++r) EXPECT_EQ(calls[r].load(), 500) << "world " << world << " rank " << r;
    for (int r = 1; r < world; ++r) EXPECT_NE(ids[r], ids[0]) << "rank " << r << " ran on the caller's thread";
  }
}

// Every rank holds the same bits afterwards, and they are the f32 rank-order sum rounded once,
// for sizes below the world (some ranks own an empty slice of the reduce-scatter), odd sizes
// (uneven slices) and larger ones.
TEST(HostCommunicator, AllReduceSumIsTheRankOrderSumRoundedOnce) {
  std::mt19937 rng(1234);
  for (int world = 1; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, comm.get());
    for (DType t : kFloatTypes) {
      for (int64_t n : {1, 2, 3, 5, 17, 64, 1001, 4099}) {
        std::vector<std::vector<float>> in;
        for (int r = 0; r < world; ++r) in.push_back(random_values(rng, t, n));
        expect_all_reduce(*comm, threads, t, in,
                          fmt::format("world {} {} n {}", world, dtype_name(t), n));
      }
    }
  }
}

// Hand-picked values where the other plausible reductions give other bits: adding in a
// different order (f32), or rounding to the dtype after each addition (f16, bf16).
TEST(HostCommunicator, AllReduceSumOrderAndRoundingAreTheDocumentedOnes) {
  auto comm = make_host_communicator(3, kNoHang);
  RankThreads threads(3, comm.get());
  // (1 + 2^25) rounds to 2^25 in f32, then - 2^25 gives 0; adding ranks 1 and 2 first gives 1.
  const float big = std::ldexp(1.0f, 25);
  expect_all_reduce(*comm, threads, DType::F32, {{1.0f}, {big}, {-big}}, "f32 rank order");
  std::vector<Tensor> xs;
  for (float v : {1.0f, big, -big}) xs.push_back(tensor_of(DType::F32, {v}));
  threads.run([&](int rank) { comm->all_reduce_sum(rank, xs[rank], nullptr); });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(xs[r].ptr<float>()[0], 0.0f) << "rank " << r;
  // 1 + half an ulp + half an ulp: exactly 1 + 1 ulp in f32; rounding after each step would
  // tie to even (1) twice.
  for (DType t : {DType::F16, DType::BF16}) {
    const float half_ulp = std::ldexp(1.0f, t == DType::F16 ? -11 : -8);
    xs.clear();
    for (float v : {1.0f, half_ulp, half_ulp}) xs.push_back(tensor_of(t, {v}));
    threads.run([&](int rank) { comm->all_reduce_sum(rank, xs[rank], nullptr); });
    const uint32_t want = t == DType::F16 ? 0x3c01 : 0x3f81;
    for (int r = 0; r < 3; ++r) EXPECT_EQ(bits_at(xs[r], 0), want) << dtype_name(t) << " rank " << r;
  }
}

// -0 + -0 is -0 in IEEE arithmetic, so the rank-order sum of negative zeros is a negative zero,
// and a group of one leaves its tensor exactly as it was (an all-reduce over one rank is the
// identity, zeros of either sign included).
TEST(HostCommunicator, AllReduceSumKeepsSignedZeros) {
  for (int world = 1; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, comm.get());
    for (DType t : kFloatTypes) {
      std::vector<std::vector<float>> in(world, std::vector<float>{-0.0f, 0.0f, -0.0f, 1.0f, -0.0f});
      expect_all_reduce(*comm, threads, t, in, fmt::format("world {} {}", world, dtype_name(t)));
    }
  }
}

// Back-to-back collectives on buffers that each rank refills as soon as its call returns: a rank
// that leaves a collective before the others have read its tensor (a missing or early barrier)
// shows up as another rank's result holding the next iteration's data.
TEST(HostCommunicator, BackToBackCollectivesOnReusedBuffers) {
  std::mt19937 rng(99);
  constexpr int kIters = 200;
  for (int world = 2; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, comm.get());
    std::vector<int64_t> sizes(kIters), rows(kIters);
    std::vector<std::vector<int64_t>> cols(kIters, std::vector<int64_t>(world));
    std::vector<std::vector<std::vector<float>>> in(kIters), parts(kIters);
    std::uniform_int_distribution<int64_t> size(1, 300), rdist(1, 4), cdist(1, 6);
    for (int it = 0; it < kIters; ++it) {
      sizes[it] = size(rng);
      rows[it] = rdist(rng);
      for (int r = 0; r < world; ++r) {
        in[it].push_back(random_values(rng, DType::F32, sizes[it]));
        cols[it][r] = cdist(rng);
        parts[it].push_back(random_values(rng, DType::F32, rows[it] * cols[it][r]));
      }
    }
    // Each rank's outputs per iteration, checked after the run.
    std::vector<std::vector<std::vector<float>>> reduced(kIters, std::vector<std::vector<float>>(world));
    std::vector<std::vector<std::vector<float>>> gathered(kIters, std::vector<std::vector<float>>(world));
    threads.run([&](int rank) {
      std::vector<float> xbuf(300), pbuf(4 * 6), obuf(4 * 6 * 4);
      for (int it = 0; it < kIters; ++it) {
        std::copy(in[it][rank].begin(), in[it][rank].end(), xbuf.begin());
        Tensor x = Tensor::view(DType::F32, {sizes[it]}, xbuf.data(), nullptr);
        comm->all_reduce_sum(rank, x, nullptr);
        reduced[it][rank].assign(xbuf.begin(), xbuf.begin() + sizes[it]);
        // Odd iterations gather to rank 0 only, as the logits are.
        std::copy(parts[it][rank].begin(), parts[it][rank].end(), pbuf.begin());
        int64_t total = 0;
        for (int r = 0; r < world; ++r) total += cols[it][r];
        Tensor p = Tensor::view(DType::F32, {rows[it], cols[it][rank]}, pbuf.data(), nullptr);
        Tensor o = Tensor::view(DType::F32, {rows[it], total}, obuf.data(), nullptr);
        const bool wants = it % 2 == 0 || rank == 0;
        comm->all_gather_cols(rank, p, wants ? &o : nullptr, nullptr);
        if (wants) gathered[it][rank].assign(obuf.begin(), obuf.begin() + rows[it] * total);
        // Scribble over the inputs at once: nobody may still be reading them.
        std::fill(xbuf.begin(), xbuf.end(), std::nanf(""));
        std::fill(pbuf.begin(), pbuf.end(), std::nanf(""));
      }
    });
    int bad = 0;
    for (int it = 0; it < kIters && bad < 10; ++it) {
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < sizes[it]; ++i) {
          const uint32_t want = reference_sum_bits(DType::F32, in[it], i);
          if (fp32_to_bits(reduced[it][r][i]) != want && bad++ < 10)
            ADD_FAILURE() << "world " << world << " iteration " << it << " rank " << r << " sum element " << i;
        }
        if (it % 2 == 1 && r != 0) continue;
        int64_t c0 = 0, total = 0;
        for (int q = 0; q < world; ++q) total += cols[it][q];
        for (int q = 0; q < world; ++q) {
          for (int64_t i = 0; i < rows[it]; ++i)
            for (int64_t j = 0; j < cols[it][q]; ++j)
              if (fp32_to_bits(gathered[it][r][i * total + c0 + j]) !=
                      fp32_to_bits(parts[it][q][i * cols[it][q] + j]) &&
                  bad++ < 10)
                ADD_FAILURE() << "world " << world << " iteration " << it << " rank " << r << " gather row " << i
                              << " part " << q << " col " << j;
          c0 += cols[it][q];
        }
      }
    }
    EXPECT_EQ(bad, 0) << "world " << world;
  }
}

// The parts side by side in rank order, with a different width per rank, for out on every rank
// and for out on rank 0 only; the parts themselves are left alone.
TEST(HostCommunicator, AllGatherColsPutsPartsSideBySide) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int64_t> cdist(1, 7);
  for (int world = 1; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, comm.get());
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8}) {
      const size_t es = dtype_info(t).block_bytes;
      for (int64_t rows : {1, 3, 5}) {
        for (bool root_only : {false, true}) {
          const std::string where =
              fmt::format("world {} {} rows {}{}", world, dtype_name(t), rows, root_only ? " root only" : "");
          std::vector<int64_t> cols(world);
          int64_t total = 0;
          for (int r = 0; r < world; ++r) total += cols[r] = cdist(rng);
          std::vector<Tensor> parts, outs;
          std::vector<std::vector<uint8_t>> before(world);
          for (int r = 0; r < world; ++r) {
            parts.push_back(Tensor::empty(t, {rows, cols[r]}));
            before[r].resize(parts[r].nbytes());
            for (uint8_t& b : before[r]) b = static_cast<uint8_t>(byte(rng));
            std::memcpy(parts[r].data(), before[r].data(), before[r].size());
            outs.push_back(Tensor::empty(t, {rows, total}));
            std::memset(outs[r].data(), 0xAB, outs[r].nbytes());
          }
          threads.run([&](int rank) {
            comm->all_gather_cols(rank, parts[rank], root_only && rank != 0 ? nullptr : &outs[rank], nullptr);
          });
          for (int r = 0; r < world; ++r) {
            EXPECT_EQ(std::memcmp(parts[r].data(), before[r].data(), before[r].size()), 0) << where << " part " << r;
            if (root_only && r != 0) {
              // Nobody was given this out, so it must still hold the fill.
              for (size_t i = 0; i < outs[r].nbytes(); ++i)
                ASSERT_EQ(outs[r].ptr<uint8_t>()[i], 0xAB) << where << " rank " << r << " byte " << i;
              continue;
            }
            for (int64_t i = 0; i < rows; ++i) {
              int64_t c0 = 0;
              for (int q = 0; q < world; ++q) {
                EXPECT_EQ(std::memcmp(outs[r].row<uint8_t>(i) + c0 * es, before[q].data() + i * cols[q] * es,
                                      cols[q] * es),
                          0)
                    << where << " rank " << r << " row " << i << " part " << q;
                c0 += cols[q];
              }
            }
          }
        }
      }
    }
  }
}

// Runs `fn` on every rank of a group of 3, expecting it to fail: every rank must leave with a
// vi::Error (quickly, not by the timeout), and the group must work again afterwards.
void expect_every_rank_fails(const std::function<void(Communicator&, int)>& fn, const std::string& what) {
  constexpr int kWorld = 3;
  auto comm = make_host_communicator(kWorld, kNoHang);
  RankThreads threads(kWorld, comm.get());
  std::vector<std::string> msgs(kWorld);
  const auto t0 = Clock::now();
  EXPECT_THROW(threads.run([&](int rank) {
    try {
      fn(*comm, rank);
    } catch (const Error& e) {
      msgs[rank] = e.what();
      throw;
    }
  }),
               Error);
  EXPECT_LT(seconds_since(t0), 30.0) << "the ranks waited for the timeout";
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(contains(msgs[r], what)) << "rank " << r << ": '" << msgs[r] << "'";
    EXPECT_FALSE(contains(msgs[r], "did not reach")) << "rank " << r << ": '" << msgs[r] << "'";
  }
  // reset() by RankThreads: a correct collective goes through.
  std::mt19937 rng(3);
  std::vector<std::vector<float>> in;
  for (int r = 0; r < kWorld; ++r) in.push_back(random_values(rng, DType::F32, 10));
  expect_all_reduce(*comm, threads, DType::F32, in, "after " + what);
}

TEST(HostCommunicator, MismatchedTensorsFailOnEveryRank) {
  // One rank brings more values than the others.
  expect_every_rank_fails(
      [](Communicator& c, int rank) {
        Tensor x = Tensor::empty(DType::F32, {rank == 2 ? 5 : 4});
        std::memset(x.data(), 0, x.nbytes());
        c.all_reduce_sum(rank, x, nullptr);
      },
      "all_reduce_sum");
  // Or another dtype.
  expect_every_rank_fails(
      [](Communicator& c, int rank) {
        Tensor x = Tensor::empty(rank == 1 ? DType::F16 : DType::F32, {4});
        std::memset(x.data(), 0, x.nbytes());
        c.all_reduce_sum(rank, x, nullptr);
      },
      "all_reduce_sum");
  // Parts of a gather with different row counts.
  expect_every_rank_fails(
      [](Communicator& c, int rank) {
        Tensor p = Tensor::empty(DType::F32, {rank == 1 ? 2 : 3, 4});
        std::memset(p.data(), 0, p.nbytes());
        Tensor out = Tensor::empty(DType::F32, {3, 12});
        c.all_gather_cols(rank, p, &out, nullptr);
      },
      "all_gather_cols");
  // One rank's out of the wrong width: only that rank can see it, yet every rank must fail
  // (the others are waiting for it at the gather's last barrier).
  expect_every_rank_fails(
      [](Communicator& c, int rank) {
        Tensor p = Tensor::empty(DType::F32, {3, 4});
        std::memset(p.data(), 0, p.nbytes());
        Tensor out = Tensor::empty(DType::F32, {3, rank == 2 ? 11 : 12});
        c.all_gather_cols(rank, p, &out, nullptr);
      },
      "all_gather_cols");
}

// A rank that throws (here outside any collective) aborts the group: the others, blocked in an
// all-reduce that rank will never join, leave with errors naming the cause, run() rethrows the
// cause itself (not one of the aborts it set off), and the group works again afterwards. Tried
// for each rank as the failing one (rank 0 runs on the caller's thread), failing both before any
// collective and after a completed one.
TEST(RankThreads, FailingRankAbortsTheOthersAndRethrowsTheCause) {
  for (int world = 2; world <= 4; ++world) {
    auto comm = make_host_communicator(world, kNoHang);
    RankThreads threads(world, comm.get());
    for (int bad = 0; bad < world; ++bad) {
      for (bool after_one : {false, true}) {
        const std::string where = fmt::format("world {} failing rank {}{}", world, bad, after_one ? " (after one)" : "");
        const std::string cause = fmt::format("injected failure on rank {}", bad);
        std::vector<std::string> msgs(world);
        std::vector<Tensor> xs;
        for (int r = 0; r < world; ++r) {
          xs.push_back(Tensor::empty(DType::F32, {7}));
          std::fill(xs[r].ptr<float>(), xs[r].ptr<float>() + 7, 1.0f);
        }
        const auto t0 = Clock::now();
        try {
          threads.run([&](int rank) {
            if (after_one) comm->all_reduce_sum(rank, xs[rank], nullptr);
            if (rank == bad) {
              std::this_thread::sleep_for(milliseconds(20));  // let the others block first
              throw std::runtime_error(cause);
            }
            try {
              comm->all_reduce_sum(rank, xs[rank], nullptr);
            } catch (const Error& e) {
              msgs[rank] = e.what();
              throw;
            }
          });
          ADD_FAILURE() << where << ": run did not throw";
        } catch (const std::exception& e) {
          EXPECT_EQ(std::string(e.what()), cause) << where;
        }
        EXPECT_LT(seconds_since(t0), 30.0) << where << ": the others waited for the timeout";
        for (int r = 0; r < world; ++r) {
          if (r == bad) continue;
          EXPECT_TRUE(contains(msgs[r], "aborted")) << where << " rank " << r << ": '" << msgs[r] << "'";
          EXPECT_TRUE(contains(msgs[r], cause)) << where << " rank " << r << ": '" << msgs[r] << "'";
        }
        // The same communicator and threads, reset by run(): a normal collective works.
        std::mt19937 rng(static_cast<unsigned>(world * 10 + bad));
        std::vector<std::vector<float>> in;
        for (int r = 0; r < world; ++r) in.push_back(random_values(rng, DType::F32, 9));
        expect_all_reduce(*comm, threads, DType::F32, in, where + ", afterwards");
        if (HasFailure()) return;  // one broken case says it; the rest would each wait for the timeout
      }
    }
  }
}

// A rank that never arrives: after the timeout the waiting ranks fail with an error naming the
// late ranks (and only them), run() rethrows it, and the group works again afterwards.
TEST(HostCommunicator, TimeoutNamesTheLateRanks) {
  auto comm = make_host_communicator(3, milliseconds(200));
  RankThreads threads(3, comm.get());
  struct Case {
    int callers;  // ranks 0 .. callers-1 call the all-reduce, the others return without it
    const char* named;
  };
  for (Case c : {Case{2, "rank(s) 2 did not reach"}, Case{1, "rank(s) 1, 2 did not reach"}}) {
    std::vector<std::string> msgs(3);
    const auto t0 = Clock::now();
    try {
      threads.run([&](int rank) {
        if (rank >= c.callers) {
          std::this_thread::sleep_for(milliseconds(50));
          return;
        }
        Tensor x = Tensor::empty(DType::F32, {4});
        std::memset(x.data(), 0, x.nbytes());
        try {
          comm->all_reduce_sum(rank, x, nullptr);
        } catch (const Error& e) {
          msgs[rank] = e.what();
          throw;
        }
      });
      ADD_FAILURE() << c.named << ": run did not throw";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), c.named)) << e.what();
    }
    const double waited = seconds_since(t0);
    EXPECT_GE(waited, 0.19) << c.named;
    EXPECT_LT(waited, 20.0) << c.named;  // the group's 200 ms, not some longer default
    for (int r = 0; r < c.callers; ++r) EXPECT_TRUE(contains(msgs[r], c.named)) << "rank " << r << ": " << msgs[r];
    for (int r = c.callers; r < 3; ++r) EXPECT_TRUE(msgs[r].empty()) << "rank " << r;
  }
  std::mt19937 rng(11);
  std::vector<std::vector<float>> in;
  for (int r = 0; r < 3; ++r) in.push_back(random_values(rng, DType::BF16, 6));
  expect_all_reduce(*comm, threads, DType::BF16, in, "after the timeouts");
}

}  // namespace
}  // namespace vi::parallel
