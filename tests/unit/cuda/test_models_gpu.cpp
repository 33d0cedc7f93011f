// The tiny golden models (tests/golden/*: llama, qwen3, Qwen3.5 hybrid) run on the GPU and on
// the CPU (which run_golden.py holds to the Hugging Face logits at 1e-3) with the same
// random tokens: a 37-token prefill, then 4 single-token decode steps. The GPU runs in both
// kernel profiles, with f16 activations (what `voltinfer --device cuda` uses) and with f32
// activations (the wiring check: every row within 1e-4 of the row max). With f16 the error of a
// row is max |Δlogit| / row max, over 41 rows (37 prompt rows, 4 steps): their median within
// 1e-2, their 90th percentile within 3e-2, the worst within 0.25, and the argmax must agree
// unless the CPU's top-2 margin is within 5e-2. Why not 5e-2 on every row, as before: the tokens
// are fresh random ones each run, and the worst row has a tail. transformers' own f16 on this
// protocol (scripts/hf_f16_noise.py --prefill 37 --end 41 --all-prefill-rows, 300 draws of each
// Qwen3.5 fixture, CPU, 2026-12-06) put it over 5e-2 in 3 of 900 draws; here, 100 runs of each
// setting (H100, 2026-12-07): worst rows to 9.8e-2 (qwen35_c volta_f16, a prompt row; 2 of its
// 200 f16 runs over 5e-2), while the medians stayed <= 4.4e-3 and the 90th percentiles <= 1.6e-2
// in every run. A wrong kernel moves every row, which the median and the 90th percentile catch.
// run_golden.py's fixed prompts hold 3e-2 on every row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "formats/weight_source.h"
#include "models/kv_budget.h"
#include "models/loader.h"
#include "models/model.h"
#include "unit/golden_model.h"
#include "ops/device_memory.h"

namespace vi::cudatest {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> golden_models() {
  std::vector<std::string> out;
  const fs::path root = test::golden_dir();
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "config.json") && fs::exists(e.path() / "model.safetensors")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The errors of a run's rows (decode steps, or prompt rows and steps) and their median, 90th
// percentile and maximum.
struct StepErrors {
  std::vector<double> e;
  void add(double x) { e.push_back(x); }
  double quantile(double q) const {
    if (e.empty()) return 0;
    std::vector<double> s = e;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())))];
  }
  double max() const { return e.empty() ? 0 : *std::max_element(e.begin(), e.end()); }
};

// Bounds on a run's per-row errors: every row for f32; for f16 the median and the 90th
// percentile tightly and the worst row loosely (see the file's head and
// RecordedStepsMatchOpByOpSteps).
struct StepBounds {
  double median, p90, max;
};

void expect_within(const StepErrors& s, const StepBounds& b, const std::string& what) {
  EXPECT_LE(s.quantile(0.5), b.median) << what << ": median row";
  EXPECT_LE(s.quantile(0.9), b.p90) << what << ": 90th-percentile row";
  EXPECT_LE(s.max(), b.max) << what << ": worst row";
}

// Max over rows of max |a − b| / max |b|, and whether every row's argmax agrees (a
// disagreement is allowed where b's top two are within 2 * tol * row max). rows (if given)
// receives each row's error.
std::pair<double, bool> compare_logits(const Tensor& a, const Tensor& b, double tol, StepErrors* rows = nullptr) {
  double worst = 0;
  bool argmax_ok = true;
  const int64_t V = b.cols();
  for (int64_t r = 0; r < b.rows(); ++r) {
    const float* x = a.row<float>(r);
    const float* y = b.row<float>(r);
    double scale = 0, err = 0;
    int64_t ax = 0, ay = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (!std::isfinite(x[i])) return {INFINITY, false};
      scale = std::max(scale, double(std::fabs(y[i])));
      err = std::max(err, double(std::fabs(x[i] - y[i])));
      if (x[i] > x[ax]) ax = i;
      if (y[i] > y[ay]) ay = i;
    }
    worst = std::max(worst, err / scale);
    if (rows != nullptr) rows->add(err / scale);
    if (ax != ay && y[ay] - y[ax] > 2 * tol * scale) argmax_ok = false;
  }
  return {worst, argmax_ok};
}

class GoldenOnGpu : public CudaOpTest {
 protected:
  // The model at `path` loaded twice: on the CPU (the reference) and on the GPU under test (split
  // over tp ranks on it).
  std::pair<std::unique_ptr<Model>, std::unique_ptr<Model>> load_on_both(const std::string& path, int tp = 1) {
    auto src = formats::open_weight_source(path);
    LoadOptions cpu_opts, gpu_opts;
    gpu_opts.ctx = g;
    gpu_opts.tp = tp;
    return {load_model(*src, cpu_opts), load_model(*src, gpu_opts)};
  }
  void prefill_then_decode(int tp);
};

TEST_P(GoldenOnGpu, PrefillThenDecodeMatchesCpu) { prefill_then_decode(1); }

// The same, with the GPU model split over 2 and 3 ranks on the one GPU (streams of their own, the
// mailbox communicator between them): the split moves only the order of the sums, so the same
// bounds hold. Fixtures that cannot be split 3 ways (KV heads) run on 2 ranks only.
TEST_P(GoldenOnGpu, SplitOverRanksMatchesCpu) {
  prefill_then_decode(2);
  prefill_then_decode(3);
}

void GoldenOnGpu::prefill_then_decode(int tp) {
  const auto models = golden_models();
  ASSERT_FALSE(models.empty()) << "no golden models under tests/golden";
  const double lim = tol(1e-4, 5e-2);  // f32: every row; f16: the argmax margin
  const StepBounds rows_lim = act() == DType::F32 ? StepBounds{1e-4, 1e-4, 1e-4} : StepBounds{1e-2, 3e-2, 0.25};
  int ran = 0;
  for (const std::string& path : models) {
    const std::string what = tp > 1 ? fmt::format("{} on {} ranks", path, tp) : path;
    std::unique_ptr<Model> cpu_model, gpu_model;
    try {
      std::tie(cpu_model, gpu_model) = load_on_both(path, tp);
    } catch (const Error& e) {
      if (tp > 1 && std::string(e.what()).find("heads") != std::string::npos) continue;  // cannot be cut tp ways
      throw;
    }
    ++ran;
    const int64_t V = cpu_model->info().n_vocab;
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V - 1));
    StepErrors rows;
    std::vector<int32_t> tokens(41);
    for (auto& t : tokens) t = u(rng());
    auto cseq = cpu_model->new_sequence(64), gseq = gpu_model->new_sequence(64);
    Tensor cl, gl;
    cpu_model->forward(cpu, std::span<const int32_t>(tokens.data(), 37), *cseq, cl, /*all_logits=*/true);
    gpu_model->forward(g, std::span<const int32_t>(tokens.data(), 37), *gseq, gl, true);
    ASSERT_EQ(gl.device(), Device::CPU);
    ASSERT_EQ(gl.dtype(), DType::F32);
    auto [err, ok] = compare_logits(gl, cl, lim, &rows);
    EXPECT_TRUE(ok) << what << ": prefill argmax";
    double worst_decode = 0;
    for (int i = 37; i < 41; ++i) {
      cpu_model->forward(cpu, std::span<const int32_t>(tokens.data() + i, 1), *cseq, cl, false);
      gpu_model->forward(g, std::span<const int32_t>(tokens.data() + i, 1), *gseq, gl, false);
      auto [e, a] = compare_logits(gl, cl, lim, &rows);
      EXPECT_TRUE(a) << what << ": decode argmax " << i;
      worst_decode = std::max(worst_decode, e);
    }
    ASSERT_EQ(rows.e.size(), 41u);
    expect_within(rows, rows_lim, what + ": prompt rows and decode steps");
    // The margins, so a run shows how close each model comes to the bounds.
    std::printf("%s %s%s: prefill %.2e, decode %.2e; rows median %.2e, p90 %.2e (bounds %.2g / %.2g / %.2g)\n",
                fs::path(path).filename().c_str(), setting_name({GetParam(), 0}).c_str(),
                tp > 1 ? fmt::format(", {} ranks", tp).c_str() : "", err, worst_decode,
                rows.quantile(0.5), rows.quantile(0.9), rows_lim.median, rows_lim.p90, rows_lim.max);
  }
  EXPECT_GT(ran, 0) << "no golden model could be split over " << tp << " ranks";
}

// Continuous batching on the GPU: one forward pass carrying a decode token of one sequence,
// a 5-token prompt chunk of another and a decode token of a third (rows of different
// lengths and positions, separate KV pools) gives each sequence the logits the CPU computes
// for it alone.
TEST_P(GoldenOnGpu, RaggedBatchMatchesSingleSequencesOnCpu) {
  const auto models = golden_models();
  ASSERT_FALSE(models.empty()) << "no golden models under tests/golden";
  const double lim = tol(1e-4, 5e-2);
  for (const std::string& path : models) {
    auto [cpu_model, gpu_model] = load_on_both(path);
    const int64_t V = cpu_model->info().n_vocab;
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V - 1));
    const int64_t prefix[3] = {11, 0, 23};  // tokens each sequence holds before the batch
    const int64_t fed[3] = {1, 5, 1};       // tokens each feeds in the batched pass
    std::vector<std::vector<int32_t>> toks(3);
    std::vector<std::unique_ptr<SequenceState>> cs, gs;
    for (int i = 0; i < 3; ++i) {
      toks[i].resize(static_cast<size_t>(prefix[i] + fed[i]));
      for (auto& t : toks[i]) t = u(rng());
      cs.push_back(cpu_model->new_sequence(64));
      gs.push_back(gpu_model->new_sequence(64));
      Tensor unused;
      if (prefix[i] > 0) {
        std::span<const int32_t> head(toks[i].data(), static_cast<size_t>(prefix[i]));
        cpu_model->forward(cpu, head, *cs[i], unused, false);
        gpu_model->forward(g, head, *gs[i], unused, false);
      }
    }
    std::vector<BatchItem> items;
    for (int i = 0; i < 3; ++i)
      items.push_back({gs[i].get(), std::span<const int32_t>(toks[i].data() + prefix[i], static_cast<size_t>(fed[i])),
                       /*all_logits=*/false});
    Tensor gl;
    gpu_model->forward_batch(g, items, gl);
    ASSERT_EQ(gl.rows(), 3);
    for (int i = 0; i < 3; ++i) {
      Tensor cl;
      cpu_model->forward(cpu, std::span<const int32_t>(toks[i].data() + prefix[i], static_cast<size_t>(fed[i])), *cs[i],
                         cl, false);
      auto [e, a] = compare_logits(gl.slice_rows(i, i + 1), cl, lim);
      EXPECT_LE(e, lim) << path << ": batch row " << i;
      EXPECT_TRUE(a) << path << ": batch row " << i << " argmax";
      EXPECT_EQ(gs[i]->n_past(), prefix[i] + fed[i]);
    }
  }
}

// Recorded decode steps (Model::forward_batch on ops::record) against the same steps run op
// by op: two sequences of one GPU model get the same tokens, one with ctx.graphs off, one on.
// Decode steps cross the 256- and 512-key buckets (a new recording each), then a 4-token
// verification step and a two-sequence step replay too. Both must agree closely (only the
// attention split count differs: exact vs bucketed key bound) and stay within the CPU
// tolerance of the CPU model, and the recorded sequence must actually have replayed.
TEST_P(GoldenOnGpu, RecordedStepsMatchOpByOpSteps) {
  const auto models = golden_models();
  ASSERT_FALSE(models.empty()) << "no golden models under tests/golden";
  // f32: every step within 1e-4 of the CPU and 1e-5 of the op-by-op steps (the two differ only
  // in the order the attention's partial sums meet; measured up to 4e-6): the sharp check of the
  // recording, where a replay at a stale position or with another sequence's state is off by
  // orders of magnitude more.
  // f16: these random tiny models amplify rounding at a few steps of a long run, so the worst
  // step of a run has a heavy tail while the typical step does not. Hugging Face transformers
  // itself, f16 against f32 on this protocol (scripts/hf_f16_noise.py, 30 draws of each Qwen3.5
  // fixture on the CPU, 2026-12-06): median step <= 3.5e-3 in every draw, 90th percentile
  // <= 7.1e-3, worst step 8e-3 to 1.6e-1 (qwen35_c: 1.06 on logits of ~6.5 at one step). Our
  // GPU's worst steps sat at 1-3e-2 with outliers to 7.6e-2 against the CPU, and to 2.1e-2
  // recorded against op by op, whose summation orders differ. So f16 bounds the median (1e-2)
  // and the 90th percentile (3e-2), which a wrong kernel or replay moves at every step, and the
  // worst step only loosely (0.5; the logits after another history, or with positions shifted by
  // one, differ from these by a median 0.8-1.3 of the row max in transformers' f32 run).
  const StepBounds lim = act() == DType::F32 ? StepBounds{1e-4, 1e-4, 1e-4} : StepBounds{1e-2, 3e-2, 0.5};
  const StepBounds same = act() == DType::F32 ? StepBounds{1e-5, 1e-5, 1e-5} : StepBounds{1e-2, 3e-2, 0.5};
  for (const std::string& path : models) {
    auto [cpu_model, gpu_model] = load_on_both(path);
    const int64_t V = cpu_model->info().n_vocab;
    std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V - 1));
    StepErrors e_same_steps, e_cpu_steps;
    std::vector<int32_t> toks(540);
    for (auto& t : toks) t = u(rng());
    auto eager_seq = gpu_model->new_sequence(1024), rec_seq = gpu_model->new_sequence(1024);
    auto cpu_seq = cpu_model->new_sequence(1024);
    ops::Context eager = g, rec = g;
    eager.graphs = false;
    const Model::StepStats before = gpu_model->step_stats();
    int64_t fed = 0;
    auto step = [&](int64_t T, bool all, const char* what) {
      std::span<const int32_t> in(toks.data() + fed, static_cast<size_t>(T));
      Tensor le, lr, lc;
      gpu_model->forward(eager, in, *eager_seq, le, all, LogitsOn::kDevice);
      Tensor he = logits_to_host_f32(eager, le);
      gpu_model->forward(rec, in, *rec_seq, lr, all, LogitsOn::kDevice);
      Tensor hr = logits_to_host_f32(rec, lr);
      cpu_model->forward(cpu, in, *cpu_seq, lc, all);
      // The argmax may differ only where the reference's top two are within the step bound.
      auto [e_same, a_same] = compare_logits(hr, he, same.max);
      EXPECT_TRUE(a_same) << path << ": " << what << " argmax, recorded vs op by op, at " << fed;
      auto [e_cpu, a_cpu] = compare_logits(hr, lc, lim.max);
      EXPECT_TRUE(a_cpu) << path << ": " << what << " argmax at " << fed;
      EXPECT_LE(e_same, same.max) << path << ": " << what << " at " << fed;
      EXPECT_LE(e_cpu, lim.max) << path << ": " << what << " at " << fed << " vs the CPU";
      e_same_steps.add(e_same);
      e_cpu_steps.add(e_cpu);
      fed += T;
    };
    step(250, false, "prefill");  // op by op in both (too many rows to record)
    for (int i = 0; i < 10; ++i) step(1, false, "decode");  // crosses 256 keys
    step(4, true, "verify");
    while (fed < 520) step(1, false, "decode");  // crosses 512 keys
    // The decode step just recorded keeps its kernels linked: no allocation or free between two
    // of them (ops::GraphShape).
    EXPECT_EQ(gpu_model->step_stats().kernels_behind_memory, 0)
        << path << ": kernels of a recorded decode step that wait on an allocation or free made after another "
        << "kernel (allocate a step's scratch before its first kernel)";
    EXPECT_EQ(eager_seq->n_past(), fed);
    EXPECT_EQ(rec_seq->n_past(), fed);
    // Two sequences in one recorded step: each gets its own logits row.
    {
      std::vector<BatchItem> items = {{rec_seq.get(), std::span<const int32_t>(toks.data() + fed, 1), false},
                                      {eager_seq.get(), std::span<const int32_t>(toks.data() + fed, 1), false}};
      Tensor lb, lc;
      gpu_model->forward_batch(rec, items, lb, LogitsOn::kDevice);
      Tensor hb = logits_to_host_f32(rec, lb);
      cpu_model->forward(cpu, std::span<const int32_t>(toks.data() + fed, 1), *cpu_seq, lc, false);
      for (int r = 0; r < 2; ++r) {
        auto [e, a] = compare_logits(hb.slice_rows(r, r + 1), lc, lim.max);
        EXPECT_LE(e, lim.max) << path << ": two-sequence step, row " << r;
        e_cpu_steps.add(e);
      }
    }
    const Model::StepStats after = gpu_model->step_stats();
    // Buckets 256, 512, 1024 for one token, the 4-token step, the two-sequence step.
    EXPECT_GE(after.recorded - before.recorded, 4) << path;
    EXPECT_GE(after.replayed - before.replayed, 250) << path;
    expect_within(e_same_steps, same, path + ": recorded vs op by op");
    expect_within(e_cpu_steps, lim, path + ": vs the CPU");
    // The margins (median / 90th percentile / worst step), so a run shows how close it comes.
    std::printf("%s %s: %lld recorded, %lld replayed; recorded vs op by op %.2e / %.2e / %.2e, "
                "vs the CPU %.2e / %.2e / %.2e\n",
                fs::path(path).filename().c_str(), setting_name({GetParam(), 0}).c_str(),
                static_cast<long long>(after.recorded - before.recorded),
                static_cast<long long>(after.replayed - before.replayed), e_same_steps.quantile(0.5),
                e_same_steps.quantile(0.9), e_same_steps.max(), e_cpu_steps.quantile(0.5), e_cpu_steps.quantile(0.9),
                e_cpu_steps.max());
  }
}

// Recorded draft-head passes (Model::draft_forward on ops::record) against the same passes run
// op by op: a golden Qwen3.5 with a random MTP head (tests/unit/golden_model.h) on the GPU, two
// main sequences fed the same 8 tokens, then on each a catch-up pass over 7 slots and three
// recursive one-slot passes (what a speculative round runs), with ctx.graphs off and on. The
// logits and the head's output must agree (only the attention split count differs: bucketed vs
// exact key bound), and the recorded side must have recorded and replayed.
TEST_P(GoldenOnGpu, RecordedDraftPassesMatchOpByOp) {
  test::ScratchDir dir;
  auto src = formats::open_weight_source(test::with_mtp_head("qwen35_a", dir.path));
  LoadOptions opts;
  opts.ctx = g;
  opts.draft_head = true;
  auto model = load_model(*src, opts);
  ASSERT_TRUE(model->has_draft_head());
  const double same = tol(1e-5, 2e-2);
  const int64_t V = model->info().n_vocab;
  std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> toks(8);
  for (auto& t : toks) t = u(rng());
  ops::Context eager = g, rec = g;
  eager.graphs = false;
  const Model::StepStats before = model->draft_step_stats();
  struct Side {
    std::unique_ptr<SequenceState> seq, dseq;
    Tensor hidden, logits, head_out;
  };
  Side e, r;
  for (Side* s : {&e, &r}) {
    s->seq = model->new_sequence(256);
    Tensor l;
    const BatchItem item{s->seq.get(), toks, true};
    model->forward_batch(eager, {&item, 1}, l, LogitsOn::kDevice, &s->hidden);
    s->dseq = model->new_draft_sequence(*s->seq);
    s->dseq->block_table() = s->seq->block_table();
    s->dseq->resume_at(0);
  }
  auto pass = [&](std::span<const int32_t> t, bool first, const std::string& what) {
    for (auto [s, ctx] : {std::pair{&e, &eager}, std::pair{&r, &rec}}) {
      const Tensor h = first ? s->hidden.slice_rows(0, static_cast<int64_t>(t.size())) : s->head_out;
      model->draft_forward(*ctx, *s->dseq, t, h, &s->logits, s->head_out, LogitsOn::kDevice);
    }
    auto [err, arg] = compare_logits(logits_to_host_f32(rec, r.logits), logits_to_host_f32(eager, e.logits), same);
    EXPECT_LE(err, same) << what << ": logits, recorded vs op by op";
    EXPECT_TRUE(arg) << what << ": argmax";
    EXPECT_CLOSE(down(r.head_out), down(e.head_out), tol(1e-5, 2e-2), what + ": head output");
  };
  pass(std::span<const int32_t>(toks.data() + 1, 7), true, "catch-up pass over 7 slots");
  for (int j = 0; j < 3; ++j) {
    const int32_t next = u(rng());
    pass(std::span<const int32_t>(&next, 1), false, "recursive pass " + std::to_string(j));
  }
  const Model::StepStats after = model->draft_step_stats();
  EXPECT_GE(after.recorded - before.recorded, 2) << "the 7-slot and the 1-slot passes";
  EXPECT_GE(after.replayed - before.replayed, 2) << "the later 1-slot passes";
  EXPECT_GE(after.eager - before.eager, 4) << "the op-by-op side";
}

// A context whose KV cache cannot fit in the GPU is refused before allocating, naming the
// flags to change; one that fits still loads.
TEST_P(GoldenOnGpu, KvCacheOrWeightsThatCannotFitAreRefused) {
  const auto models = golden_models();
  ASSERT_FALSE(models.empty()) << "no golden models under tests/golden";
  auto src = formats::open_weight_source(models.front());
  LoadOptions gpu_opts;
  gpu_opts.ctx = g;
  auto model = load_model(*src, gpu_opts);
  try {
    model->new_sequence(int64_t(1) << 40);
    FAIL() << "a 2^40-token context was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--ctx-size"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GiB free"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(model->new_sequence(256));
  const ops::DeviceMemory m = ops::device_memory(g);
  EXPECT_THROW(check_weights_fit(g, m.total + (size_t(1) << 30), "big.gguf"), Error);
}

VI_CUDA_INSTANTIATE(GoldenOnGpu);

}  // namespace
}  // namespace vi::cudatest
