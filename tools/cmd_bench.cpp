// `voltinfer bench`: prefill and decode speed with the conditions BENCHMARK.md asks for.
//   prefill  -p 512,8192        the deterministic code / Chinese prompt cut to exact token
//                               counts: tok/s and MFU (FLOPs counted from the ops that ran)
//   decode   -d 512,8192,131072 ms per round and tok/s at these context lengths, and MBU:
//                               bytes the round's ops read and write (weights, KV at that
//                               context, recurrent states) over the round time over the
//                               device's copy bandwidth, measured in this process
//   verify   --verify 1,2,4,8   ms for a round that feeds T tokens at once (MTP verification)
//   spec     --spec-rounds 3    ms for a whole MTP round (head passes, verify with checkpoints,
//                               going back), tok/s computed at reference acceptance rates
//   --profile-ops               per-op tables of a decode round and a prefill (ops/profiler.h)
//   --sms 94                    the graphs (decode and verify rounds) on 94 of the card's SMs (a proxy
//                               of a card with more bandwidth an SM: tools/bench_util.h)
//   --trace-kernels             per-kernel table of decode rounds from a CUPTI trace: the GPU's
//                               own kernel times in the replayed step (tools/bench_trace.h);
//                               --trace-tokens 4 traces verify rounds of 4 tokens instead
// Every configuration runs -r times; the markdown table gives mean and min–max, --json
// writes every raw sample as a JSON line. An MBU above 100% is refused as a measurement
// error, never printed as a result.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "ops/memory.h"
#include "ops/profiler.h"
#include "ops/sample.h"
#include "tools/bench_prompts.h"
#include "tools/bench_trace.h"
#include "tools/bench_util.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

using json = nlohmann::json;

struct BenchArgs {
  ModelFlags model;
  std::vector<int64_t> prompt_lens;  // prefill tests
  std::vector<int64_t> depths;       // decode tests
  std::vector<int64_t> verify;       // tokens per verification round
  bool verify_checkpoints = false;   // verify rounds keep the recurrent state after each token
  std::vector<int64_t> spec_rounds;  // MTP drafts per timed speculative round (--spec-rounds)
  int64_t n_gen = 32;
  int reps = 4;
  std::vector<std::string> styles = {"code"};
  std::string fill = "synthetic";
  std::string json_out, md_out;
  int64_t n_batch = 0;  // 0: as the server (2048 on a GPU, 256 on the CPU)
  bool profile_ops = false;
  int profile_rounds = 8;
  bool trace_kernels = false;
  int trace_rounds = 8;
  std::vector<int64_t> trace_tokens = {1};  // tokens per traced round: one table per entry
  double bandwidth_gbs = 0, peak_tflops = 0;
  int sms = 0;  // --sms: the SMs the graphs run on (0: all)
};

struct Stats {
  double mean = 0, min = 0, max = 0;
};
Stats summarize(const std::vector<double>& v) {
  if (v.empty()) return {};
  double s = std::accumulate(v.begin(), v.end(), 0.0);
  return {s / v.size(), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int32_t argmax(const Tensor& logits, int64_t row) {
  const float* p = logits.ptr<float>() + row * logits.cols();
  return static_cast<int32_t>(std::max_element(p, p + logits.cols()) - p);
}

// Bytes of a round that touch device memory: every op but the logits' trip to the host.
double device_bytes(const ops::OpProfiler::Summary& s) {
  double b = 0;
  for (const auto& r : s.rows)
    if (r.op != "download") b += r.bytes;
  return b;
}

class Bench {
 public:
  explicit Bench(const BenchArgs& a) : a_(a) {}
  void run();

 private:
  std::vector<int32_t> prompt_tokens(const std::string& style, int64_t n, int shift);
  void prefill_test(const std::string& style, int64_t P);
  void decode_test(const std::string& style, int64_t depth);
  // The per-kernel table of rounds of T tokens (1: decode, more: verify) at this depth
  // (--trace-kernels, --trace-tokens); untraced_ms: the timed rounds' time (the decode rounds'
  // mean, the T-token verify rounds' median), to show what tracing costs; 0 where none of
  // that width was timed (T not in --verify).
  void trace_test(int64_t depth, int64_t T, SequenceState& seq, int32_t& tok, Tensor& logits, double untraced_ms);
  // A fresh sequence holding `depth` tokens of context (synthetic or prefilled).
  std::unique_ptr<SequenceState> filled_sequence(const std::string& style, int64_t depth, int rep, int32_t& next);
  json conditions() const;
  void emit(json j);
  void row(const std::string& test, const std::string& style, const std::vector<double>& per_s, const std::string& unit,
           const std::string& extra);
  // MBU in percent, or a negative value when it would exceed 100% (a measurement error).
  double mbu(double bytes, double round_s) const { return 100.0 * bytes / round_s / (ceil_.copy_gbs * 1e9); }
  std::string mbu_text(double pct) const {
    return pct > 100.0 ? fmt::format("refused ({:.0f}% > 100%: measurement error)", pct) : fmt::format("{:.1f}%", pct);
  }

  BenchArgs a_;
  Loaded L_;
  int graph_sms_ = 0;  // --sms as the device made it (0: all SMs)
  Ceilings ceil_;
  std::string device_, profile_, wformat_, kv_dtype_;
  std::map<std::string, std::vector<int32_t>> text_;  // tokenized prompt text per style
  std::ofstream json_;
  std::string table_, profiles_;
};

std::vector<int32_t> Bench::prompt_tokens(const std::string& style, int64_t n, int shift) {
  std::vector<int32_t>& text = text_[style];
  for (size_t chars = 4 * static_cast<size_t>(n + shift) + 1024; static_cast<int64_t>(text.size()) < n + shift;
       chars *= 2)
    text = L_.tokenizer->encode(bench_text(style, chars), false, false);
  return {text.begin() + shift, text.begin() + shift + n};
}

json Bench::conditions() const {
  const ModelInfo& info = L_.model->info();
  return json{{"model", info.name},
              {"arch", info.arch},
              {"params", info.n_params},
              {"weight_bytes", info.weight_bytes},
              {"weight_format", wformat_},
              {"device", device_},
              {"kernel_profile", profile_},
              {"cuda_graphs", L_.ctx.device != Device::CPU && L_.ctx.graphs},
              {"act_dtype", dtype_name(L_.ctx.act)},
              {"int8_activations", L_.ctx.int8_act},
              {"kv_dtype", kv_dtype_},
              {"threads", ThreadPool::global().size()},
              {"speculation", "none"},
              {"concurrency", 1},
              {"cache", "cold"},
              {"graph_sms", graph_sms_ > 0 ? json(graph_sms_) : json(nullptr)},
              {"copy_gbs", ceil_.copy_gbs},
              {"copy_gbs_how", ceil_.copy_how},
              {"tensor_tflops", ceil_.tensor_tflops},
              {"tensor_tflops_how", ceil_.tensor_how}};
}

void Bench::emit(json j) {
  if (!json_.is_open()) return;
  json c = conditions();
  c.update(j);
  json_ << c.dump() << "\n";
  json_.flush();
}

void Bench::row(const std::string& test, const std::string& style, const std::vector<double>& v,
                const std::string& unit, const std::string& extra) {
  Stats s = summarize(v);
  table_ += fmt::format("| {} | {} | {} | {} | {:.1f} {} | {:.1f}–{:.1f} | {} |\n", device_, profile_, test, style,
                        s.mean, unit, s.min, s.max, extra);
}

std::unique_ptr<SequenceState> Bench::filled_sequence(const std::string& style, int64_t depth, int rep,
                                                      int32_t& next) {
  auto seq = L_.model->new_sequence(L_.n_ctx);
  kv_dtype_ = kv_dtype_name(*seq);
  // The token fed first after the context (a synthetic context needs no other text).
  std::vector<int32_t> toks = prompt_tokens(style, a_.fill == "synthetic" ? 1 : depth + 1, rep % 7);
  next = toks.back();
  if (a_.fill == "synthetic") {
    fill_context_synthetic(L_.ctx, *seq, depth, 1000 + rep);
  } else if (depth > 0) {
    toks.pop_back();
    prefill(*L_.model, L_.ctx, *seq, toks, a_.n_batch);
  }
  return seq;
}

void Bench::prefill_test(const std::string& style, int64_t P) {
  std::vector<double> tps, mfu;
  ops::OpProfiler counter(L_.ctx.device, /*timed=*/false);  // FLOPs of the ops that ran
  for (int rep = 0; rep < a_.reps; ++rep) {
    std::vector<int32_t> prompt = prompt_tokens(style, P, rep % 7);
    auto seq = L_.model->new_sequence(L_.n_ctx);
    kv_dtype_ = kv_dtype_name(*seq);
    counter.reset();
    L_.ctx.profiler = &counter;
    counter.begin_round(L_.ctx);
    Timer t;
    Tensor logits = prefill(*L_.model, L_.ctx, *seq, prompt, a_.n_batch);
    ops::synchronize(L_.ctx);
    const double s = t.s();
    counter.end_round(L_.ctx);
    L_.ctx.profiler = nullptr;
    const double flops = counter.summary().flops;
    tps.push_back(P / s);
    const double pct = ceil_.tensor_tflops > 0 ? 100.0 * flops / s / (ceil_.tensor_tflops * 1e12) : -1;
    if (pct >= 0) mfu.push_back(pct);
    const bool mfu_ok = pct >= 0 && pct <= 100;  // above 100%: the FLOPs or the peak are wrong
    emit({{"test", "prefill"}, {"prompt_style", style}, {"prompt_tokens", P}, {"batch", a_.n_batch}, {"rep", rep},
          {"prefill_s", s}, {"tok_s", P / s}, {"flops", flops}, {"mfu_pct", mfu_ok ? json(pct) : json(nullptr)},
          {"mfu_error", pct > 100 ? json(fmt::format("computed {:.1f}% > 100%", pct)) : json(nullptr)}});
  }
  if (a_.profile_ops) {
    // One more prefill with events around every op: where the prefill time goes (the timed
    // runs above carry no events).
    std::vector<int32_t> prompt = prompt_tokens(style, P, 0);
    auto seq = L_.model->new_sequence(L_.n_ctx);
    ops::OpProfiler prof(L_.ctx.device);
    L_.ctx.profiler = &prof;
    prof.begin_round(L_.ctx);
    prefill(*L_.model, L_.ctx, *seq, prompt, a_.n_batch);
    prof.end_round(L_.ctx);
    L_.ctx.profiler = nullptr;
    const ops::OpProfiler::Summary s = prof.summary();
    profiles_ += fmt::format(
        "\n### Prefill of {} tokens ({} prompt, batches of {}) — {}, profile {}, {}, KV {}\n\n"
        "Per-op times with CUDA events around every op entry point, one profiled prefill ({:.1f} ms with the "
        "events). share = op time / profiled wall time.\n\n",
        P, style, a_.n_batch, device_, profile_, wformat_, kv_dtype_, s.wall_us / 1e3);
    profiles_ += prof.markdown();
  }
  Stats m = summarize(mfu);
  row(fmt::format("prefill {}", P), style, tps, "tok/s",
      mfu.empty()   ? "MFU n/a (no tensor peak)"
      : m.max > 100 ? fmt::format("MFU refused ({:.0f}% > 100%: measurement error)", m.max)
                    : fmt::format("MFU {:.1f}% ({:.1f}–{:.1f})", m.mean, m.min, m.max));
}

void Bench::decode_test(const std::string& style, int64_t depth) {
  std::vector<double> round_ms_rep, tps_rep, mbu_rep, host_ms_rep;
  double bytes_round = 0;
  std::map<int64_t, std::vector<double>> verify_ms, spec_ms;
  std::map<int64_t, std::vector<std::array<double, 3>>> spec_parts_ms;  // per rep: draft, verify, rollback medians
  for (int rep = 0; rep < a_.reps; ++rep) {
    int32_t tok = 0;
    auto seq = filled_sequence(style, depth, rep, tok);
    Tensor logits;
    for (int w = 0; w < 2; ++w) {  // warm-up rounds (first-use allocations, caches)
      L_.model->forward(L_.ctx, {&tok, 1}, *seq, logits, false);
      tok = argmax(logits, 0);
    }
    // Bytes of one round, counted from the ops it runs (weights, KV, states, activations).
    ops::OpProfiler counter(L_.ctx.device, /*timed=*/false);
    L_.ctx.profiler = &counter;
    counter.begin_round(L_.ctx);
    L_.model->forward(L_.ctx, {&tok, 1}, *seq, logits, false);
    counter.end_round(L_.ctx);
    L_.ctx.profiler = nullptr;
    tok = argmax(logits, 0);
    bytes_round = device_bytes(counter.summary());

    // Timed rounds as the server runs them: logits stay on the device, a greedy pick there
    // sends back the token (a recorded step replays here unless --no-cuda-graphs).
    std::vector<double> ms;
    const std::vector<ops::SampleParams> greedy(1);
    std::vector<ops::SampledToken> picked(1);
    for (int w = 0; w < 2; ++w) {  // warm-up of this path (records the step shape)
      L_.model->forward(L_.ctx, {&tok, 1}, *seq, logits, false, LogitsOn::kDevice);
      picked.resize(1);
      ops::sample(L_.ctx, logits, greedy, {}, picked);
      tok = picked[0].token;
    }
    ops::synchronize(L_.ctx);
    // host_ms: until forward() returns: the step's host work (plan, staging and upload, the
    // launch), which the device waits for after the previous round's token came back.
    std::vector<double> host_ms;
    const int64_t eager_before = L_.model->step_stats().eager;
    Timer all;
    for (int64_t i = 0; i < a_.n_gen; ++i) {
      Timer t;
      L_.model->forward(L_.ctx, {&tok, 1}, *seq, logits, false, LogitsOn::kDevice);
      host_ms.push_back(t.ms());
      picked.resize(1);
      ops::sample(L_.ctx, logits, greedy, {}, picked);  // ends with the token on the host
      ms.push_back(t.ms());
      tok = picked[0].token;
    }
    const double total_s = all.s();
    // --sms: only the graphs run on the partition; a round run op by op would use every SM.
    VI_CHECK(graph_sms_ == 0 || L_.model->step_stats().eager == eager_before,
             "--sms: {} timed decode rounds ran op by op (not as graphs), on every SM",
             L_.model->step_stats().eager - eager_before);
    const double mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
    host_ms_rep.push_back(std::accumulate(host_ms.begin(), host_ms.end(), 0.0) / host_ms.size());
    const double pct = mbu(bytes_round, mean_ms / 1e3);
    round_ms_rep.push_back(mean_ms);
    tps_rep.push_back(a_.n_gen / total_s);
    mbu_rep.push_back(pct);
    emit({{"test", "decode"}, {"fill", a_.fill}, {"prompt_style", style}, {"context", depth}, {"rounds", a_.n_gen},
          {"rep", rep}, {"round_ms", ms}, {"round_ms_mean", mean_ms}, {"round_ms_median", median(ms)},
          {"tok_s", a_.n_gen / total_s}, {"bytes_per_round", bytes_round}, {"host_ms_mean", host_ms_rep.back()},
          {"mbu_pct", pct <= 100 ? json(pct) : json(nullptr)},
          {"mbu_error", pct <= 100 ? json(nullptr) : json(fmt::format("computed {:.1f}% > 100%", pct))}});

    // Verification rounds: T tokens at once, logits for each (what MTP k = T-1 will run).
    for (int64_t T : a_.verify) {
      std::vector<double> v;
      std::vector<int32_t> toks(static_cast<size_t>(T), tok);
      const std::vector<ops::SampleParams> greedy_t(static_cast<size_t>(T));
      int64_t eager_timed = 0;  // rounds 1..3 run op by op (--sms needs graphs)
      for (int r = 0; r < 4; ++r) {
        if (seq->n_past() + T > seq->capacity()) break;
        const int64_t eager_before_round = L_.model->step_stats().eager;
        Timer t;
        BatchItem item{seq.get(), toks, /*all_logits=*/true, /*checkpoints=*/a_.verify_checkpoints && T > 1};
        L_.model->forward_batch(L_.ctx, {&item, 1}, logits, LogitsOn::kDevice);
        picked.resize(static_cast<size_t>(T));
        ops::sample(L_.ctx, logits, greedy_t, {}, picked);
        if (r > 0) v.push_back(t.ms());  // the first of each width warms its buffers (and records)
        if (r > 0) eager_timed += L_.model->step_stats().eager - eager_before_round;
        for (int64_t j = 0; j < T; ++j) toks[j] = picked[static_cast<size_t>(j)].token;
      }
      VI_CHECK(graph_sms_ == 0 || eager_timed == 0, "--sms: {} timed {}-token rounds ran op by op, on every SM",
               eager_timed, T);
      if (v.empty()) continue;
      verify_ms[T].push_back(median(v));
      emit({{"test", "verify"}, {"fill", a_.fill}, {"prompt_style", style}, {"context", depth}, {"tokens", T},
            {"checkpoints", a_.verify_checkpoints && T > 1}, {"rep", rep}, {"round_ms", v},
            {"round_ms_median", median(v)}});
    }

    // Whole speculative rounds with k MTP drafts: the head's catch-up pass and its k - 1
    // recursive passes, the verify pass of 1 + k tokens with checkpoints, the greedy picks, and
    // going back to the first token (a round whose drafts are all refused: the longest
    // rollback). Random weights keep no drafts, so tokens per round are computed from
    // acceptance rates (BENCHMARK.md), not measured.
    for (int64_t k : a_.spec_rounds) {
      if (!L_.model->has_draft_head()) break;
      auto dseq = L_.model->new_draft_sequence(*seq);
      dseq->block_table() = seq->block_table();
      dseq->resume_at(seq->n_past());
      std::vector<double> v, v_draft, v_verify, v_back;  // whole rounds, and their three parts
      std::vector<int32_t> fed(static_cast<size_t>(k + 1), tok);
      const std::vector<ops::SampleParams> greedy_t(static_cast<size_t>(k + 1));
      Tensor hidden, head_out, dl;
      BatchItem first{seq.get(), {&tok, 1}, false};
      L_.model->forward_batch(L_.ctx, {&first, 1}, logits, LogitsOn::kDevice, &hidden);  // a hidden row to start
      dseq->resume_at(seq->n_past() - 1);
      for (int r = 0; r < 5; ++r) {
        if (seq->n_past() + k + 1 > seq->capacity()) break;
        Timer t;
        Tensor h = hidden.slice_rows(hidden.rows() - 1, hidden.rows());
        for (int64_t j = 0; j < k; ++j) {  // the catch-up slot, then the recursive ones
          L_.model->draft_forward(L_.ctx, *dseq, {&fed[static_cast<size_t>(j)], 1}, h, &dl, head_out,
                                  LogitsOn::kDevice);
          h = head_out;
          picked.resize(1);
          ops::sample(L_.ctx, dl, greedy, {}, picked);
          fed[static_cast<size_t>(j) + 1] = picked[0].token;
        }
        dseq->truncate(seq->n_past());  // the recursive slots were guesses
        const double drafted_at = t.ms();  // the last draft's pick has come back to the host
        BatchItem item{seq.get(), fed, /*all_logits=*/true, /*checkpoints=*/true};
        L_.model->forward_batch(L_.ctx, {&item, 1}, logits, LogitsOn::kDevice, &hidden);
        picked.resize(static_cast<size_t>(k + 1));
        ops::sample(L_.ctx, logits, greedy_t, {}, picked);
        const double verified_at = t.ms();
        VI_CHECK(seq->rollback(seq->n_past() - k), "bench: the verify pass left no checkpoint to go back to");
        hidden = hidden.slice_rows(0, 1);
        ops::synchronize(L_.ctx);  // the parts are timed apart: the round waits for its rollback here
        if (r > 0) {  // the first warms the round's buffers
          v.push_back(t.ms());
          v_draft.push_back(drafted_at);
          v_verify.push_back(verified_at - drafted_at);
          v_back.push_back(v.back() - verified_at);
        }
        fed[0] = picked[0].token;
      }
      if (v.empty()) continue;
      spec_ms[k].push_back(median(v));
      spec_parts_ms[k].push_back({median(v_draft), median(v_verify), median(v_back)});
      emit({{"test", "spec_round"}, {"fill", a_.fill}, {"prompt_style", style}, {"context", depth}, {"drafts", k},
            {"rep", rep}, {"round_ms", v}, {"round_ms_median", median(v)}, {"draft_ms", v_draft},
            {"verify_ms", v_verify}, {"rollback_ms", v_back}});
    }

    if (a_.profile_ops && rep == 0) {
      ops::OpProfiler prof(L_.ctx.device);
      L_.ctx.profiler = &prof;
      for (int r = 0; r < a_.profile_rounds; ++r) {
        if (seq->n_past() + 1 > seq->capacity()) break;
        prof.begin_round(L_.ctx);
        L_.model->forward(L_.ctx, {&tok, 1}, *seq, logits, false);
        prof.end_round(L_.ctx);
        tok = argmax(logits, 0);
      }
      L_.ctx.profiler = nullptr;
      const ops::OpProfiler::Summary s = prof.summary();
      std::string head = fmt::format(
          "\n### Decode round at context {} — {}, profile {}, {}, KV {}\n\n"
          "Per-op times with CUDA events (CPU: wall clock) around every op entry point, mean of {} profiled "
          "rounds (the events add host work, so the round is slower than unprofiled: {:.2f} ms vs {:.2f} ms). "
          "GB/s = op bytes / op time; share = op time / profiled round wall time.\n\n",
          depth, device_, profile_, wformat_, kv_dtype_, s.rounds, s.wall_us / 1e3, mean_ms);
      profiles_ += head + prof.markdown();
      json rows = json::array();
      for (const auto& r : s.rows)
        rows.push_back({{"op", r.op}, {"dtype", r.dtype}, {"shape", r.shape}, {"calls", r.calls}, {"us", r.us},
                        {"bytes", r.bytes}, {"flops", r.flops}});
      emit({{"test", "profile"}, {"fill", a_.fill}, {"context", depth}, {"rounds", s.rounds},
            {"round_wall_us", s.wall_us}, {"round_device_us", s.device_us}, {"op_us", s.op_us}, {"ops", rows}});
    }
    if (a_.trace_kernels && rep == 0)
      for (int64_t T : a_.trace_tokens) {
        const double untraced = T == 1 ? mean_ms : verify_ms.count(T) ? verify_ms[T].back() : 0.0;
        trace_test(depth, T, *seq, tok, logits, untraced);
      }
  }
  Stats r = summarize(round_ms_rep), m = summarize(mbu_rep);
  std::string extra = fmt::format("{:.2f} ms/round ({:.2f}–{:.2f}); {:.4g} GB/round; MBU {}; host {:.3f} ms/round",
                                  r.mean, r.min, r.max, bytes_round / 1e9,
                                  m.max > 100 ? mbu_text(m.max) : fmt::format("{:.1f}% ({:.1f}–{:.1f})", m.mean, m.min, m.max),
                                  summarize(host_ms_rep).mean);
  row(fmt::format("decode {} @{}", a_.n_gen, depth), a_.fill == "synthetic" ? "synthetic" : style, tps_rep, "tok/s",
      extra);
  for (auto& [k, v] : spec_ms) {
    // Tokens a round gives at per-draft acceptance a: 1 + a + ... + a^k (greedy drafts kept
    // in order); the rates are the seeds' MTP k = 3 measurements on real text.
    Stats s = summarize(v);
    auto per_round = [&](double a) { return (1.0 - std::pow(a, static_cast<double>(k + 1))) / (1.0 - a); };
    std::array<double, 3> parts{};  // mean over reps of each part's median
    for (const auto& p : spec_parts_ms[k])
      for (size_t i = 0; i < 3; ++i) parts[i] += p[i] / static_cast<double>(spec_parts_ms[k].size());
    table_ += fmt::format(
        "| {} | {} | MTP round, {} drafts @{} | {} | {:.2f} ms/round | {:.2f}–{:.2f} | drafts {:.2f} ms, verify with "
        "checkpoints {:.2f}, rollback {:.2f}; computed: {:.0f} tok/s at acceptance 0.77 (code), {:.0f} at 0.5 "
        "(Chinese); measured drafts kept: none (random weights) |\n",
        device_, profile_, k, depth, a_.fill == "synthetic" ? "synthetic" : style, s.mean, s.min, s.max, parts[0],
        parts[1], parts[2], per_round(0.77) / (s.mean / 1e3), per_round(0.5) / (s.mean / 1e3));
  }
  for (auto& [T, v] : verify_ms) {
    Stats s = summarize(v);
    const double base = verify_ms.count(1) ? summarize(verify_ms[1]).mean : 0;
    table_ += fmt::format("| {} | {} | verify {} tokens{} @{} | {} | {:.2f} ms/round | {:.2f}–{:.2f} | {} |\n", device_,
                          profile_, T, a_.verify_checkpoints && T > 1 ? " (checkpoints)" : "", depth,
                          a_.fill == "synthetic" ? "synthetic" : style, s.mean, s.min, s.max,
                          base > 0 ? fmt::format("{:.2f}x the 1-token round", s.mean / base) : "");
  }
}

void Bench::trace_test(int64_t depth, int64_t T, SequenceState& seq, int32_t& tok, Tensor& logits,
                       double untraced_ms) {
  // A round as the timed ones run it: one token (decode), or T tokens with logits for each
  // (a verify round, as above).
  const std::vector<ops::SampleParams> greedy(static_cast<size_t>(T));
  std::vector<ops::SampledToken> picked(static_cast<size_t>(T));
  std::vector<int32_t> toks(static_cast<size_t>(T), tok);
  std::vector<double> traced_ms;
  auto round = [&](ops::OpProfiler* prof) {
    VI_CHECK(seq.n_past() + T <= seq.capacity(), "bench: no context left for the traced rounds");
    L_.ctx.profiler = prof;
    if (prof) prof->begin_round(L_.ctx);
    Timer t;
    L_.model->forward(L_.ctx, toks, seq, logits, T > 1, LogitsOn::kDevice);
    picked.resize(static_cast<size_t>(T));
    ops::sample(L_.ctx, logits, greedy, {}, picked);  // ends with the tokens on the host
    if (prof) prof->end_round(L_.ctx);
    else traced_ms.push_back(t.ms());
    L_.ctx.profiler = nullptr;
    for (int64_t j = 0; j < T; ++j) toks[j] = picked[static_cast<size_t>(j)].token;
    tok = toks[0];
  };
  uint64_t dropped = 0;
  const ops::KernelTimeline t = trace_decode_kernels(L_.ctx.device, a_.trace_rounds, round, &dropped);
  L_.ctx.profiler = nullptr;
  const double traced = traced_ms.empty() ? 0 : std::accumulate(traced_ms.begin(), traced_ms.end(), 0.0) / traced_ms.size();
  const std::string what = T == 1 ? std::string("a decode round") : fmt::format("a verify round of {} tokens", T);
  std::string head = fmt::format("\n### Kernel trace of {} at context {} — {}, profile {}, {}, KV {}\n\n", what,
                                 depth, device_, profile_, wformat_, kv_dtype_);
  if (t.rounds == 0) {
    profiles_ += head + "Not traced: " + t.note + ".\n";
    emit({{"test", "kernel_trace"}, {"context", depth}, {"tokens", T}, {"error", t.note}});
    return;
  }
  head += fmt::format(
      "GPU timestamps of every kernel (CUPTI activity records) in {} such rounds as the timed ones run (recorded "
      "steps replayed when graphs are on); a traced round took {:.2f} ms on the host clock {}. "
      "Ops and bytes come from one extra round run op by op. MB are estimates from the tensors each op reads and "
      "writes; GB/s = MB / charged time.{}\n\n",
      t.rounds, traced,
      untraced_ms > 0 ? fmt::format("against {:.2f} ms untraced", untraced_ms)
                      : fmt::format("(no untraced round of {} tokens was timed: add {} to --verify)", T, T),
      dropped ? fmt::format(" CUPTI dropped {} records: the trace has holes.", dropped) : "");
  profiles_ += head + ops::kernel_timeline_markdown(t);
  json rows = json::array();
  for (const auto& r : t.rows) {
    json per_kernel = json::array();  // each kernel of the row: its charged µs
    for (size_t i = 0; i < r.kernel_names.size() && i < r.kernel_us.size(); ++i)
      per_kernel.push_back({{"kernel", r.kernel_names[i]}, {"us", r.kernel_us[i]}});
    rows.push_back({{"op", r.op}, {"dtype", r.dtype}, {"shape", r.shape}, {"kernels", r.kernels},
                    {"per_kernel", per_kernel}, {"launches", r.launches}, {"us", r.us}, {"gap_us", r.gap_us},
                    {"own_us", r.own_us}, {"bytes", r.bytes}});
  }
  emit({{"test", "kernel_trace"}, {"context", depth}, {"tokens", T}, {"rounds", t.rounds}, {"span_us", t.span_us},
        {"busy_us", t.busy_us}, {"kernels", t.kernels}, {"labelled", t.labelled}, {"note", t.note},
        {"traced_round_ms", traced}, {"untraced_round_ms", untraced_ms > 0 ? json(untraced_ms) : json(nullptr)},
        {"dropped", dropped}, {"rows", rows}});
}

void Bench::run() {
  int64_t longest = 0;
  for (int64_t p : a_.prompt_lens) longest = std::max(longest, p);
  const int64_t verify_tokens = 4 * std::accumulate(a_.verify.begin(), a_.verify.end(), int64_t{0}) +
                                6 * std::accumulate(a_.spec_rounds.begin(), a_.spec_rounds.end(), int64_t{0}) +
                                2 * static_cast<int64_t>(a_.spec_rounds.size());
  const int64_t trace_tokens = std::accumulate(a_.trace_tokens.begin(), a_.trace_tokens.end(), int64_t{0});
  for (int64_t d : a_.depths)
    longest = std::max(longest, d + 3 + a_.n_gen + verify_tokens + (a_.profile_ops ? a_.profile_rounds : 0) +
                                    (a_.trace_kernels ? (a_.trace_rounds + 1) * trace_tokens : 0));
  if (a_.model.ctx_size == 0) a_.model.ctx_size = longest + 16;
  a_.model.draft_head = !a_.spec_rounds.empty();
  graph_sms_ = restrict_graphs_to_sms(a_.sms);  // before the load records any graph
  L_ = load(a_.model);
  if (a_.n_batch == 0) a_.n_batch = L_.ctx.device == Device::CPU ? 256 : 2048;  // what `serve` uses
  VI_CHECK(longest <= L_.n_ctx, "the tests need a context of {} tokens but -c is {}", longest, L_.n_ctx);
  VI_CHECK(graph_sms_ == 0 || L_.ctx.device == Device::CUDA, "--sms: the model runs on the {}, not on a CUDA device",
           device_name(L_.ctx.device));
  VI_CHECK(graph_sms_ == 0 || L_.ctx.graphs, "--sms runs the CUDA graphs on some SMs, and graphs are off");
  device_ = device_label(L_.ctx) + (graph_sms_ > 0 ? fmt::format(", graphs on {} SMs", graph_sms_) : "") +
            (a_.model.tp > 1 ? fmt::format(", split over {} ranks", a_.model.tp) : "");
  profile_ = profile_label(L_.ctx);
  if (L_.ctx.device != Device::CPU && !L_.ctx.graphs) profile_ += ", no graphs";
  wformat_ = weight_format_summary(*L_.weights);
  ceil_ = measure_ceilings(L_.ctx, a_.bandwidth_gbs, a_.peak_tflops);
  if (!a_.json_out.empty()) json_.open(a_.json_out, std::ios::app);
  emit({{"test", "ceilings"}});

  for (const std::string& style : a_.styles)
    for (int64_t P : a_.prompt_lens) prefill_test(style, P);
  // A synthetic context has no text: one decode series suffices for all styles.
  const std::vector<std::string> decode_styles =
      a_.fill == "synthetic" ? std::vector<std::string>{a_.styles.front()} : a_.styles;
  for (const std::string& style : decode_styles)
    for (int64_t d : a_.depths) decode_test(style, d);

  const ModelInfo& info = L_.model->info();
  std::string out = fmt::format(
      "\n{} ({}, {:.2f}B params, {:.2f} GB of weights: {}), {} activations, KV {}, one sequence, no speculation, "
      "cold\n"
      "ceilings: copy {:.0f} GB/s [{}]; tensor {} [{}]\n"
      "decode context: {}\n\n"
      "| device | profile | test | prompt | mean | min–max | notes |\n"
      "| --- | --- | --- | --- | ---: | ---: | --- |\n",
      info.name, info.arch, info.n_params / 1e9, info.weight_bytes / 1e9, wformat_,
      L_.ctx.int8_act ? fmt::format("{} (int8 into the Q4_K projections after norms)", dtype_name(L_.ctx.act))
                      : std::string(dtype_name(L_.ctx.act)),
      kv_dtype_,
      ceil_.copy_gbs, ceil_.copy_how, ceil_.tensor_tflops > 0 ? fmt::format("{:.0f} TFLOP/s", ceil_.tensor_tflops) : "n/a",
      ceil_.tensor_how,
      a_.fill == "synthetic"
          ? "synthetic fill (random K/V rows and recurrent states written into the cache, no prefill)"
          : fmt::format("prefill of the {} prompt in batches of {}", a_.styles.front(), a_.n_batch));
  out += table_;
  out += fmt::format(
      "\n{} repetitions per row; decode rounds are greedy single-token forward passes timed on the host after two "
      "warm-up rounds, each ending with the greedy pick on the device and its token on the host, as the server runs "
      "them ({}); MBU = bytes the round's ops read and write / mean round time / copy bandwidth; MFU = FLOPs of the "
      "ops that ran / prefill time / tensor rate.\n",
      a_.reps,
      L_.ctx.device == Device::CPU ? "CPU" : L_.ctx.graphs ? "recorded steps replayed as CUDA graphs"
                                                           : "op by op, --no-cuda-graphs");
  out += profiles_;
  std::fputs(out.c_str(), stdout);
  if (!a_.md_out.empty()) {
    std::ofstream md(a_.md_out, std::ios::app);
    md << out;
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed, MBU and MFU (deterministic prompts, repeated runs)");
  a->model.add(*cmd);
  cmd->add_option("-p,--n-prompt", a->prompt_lens, "Prefill tests: prompt lengths in tokens (e.g. 512,8192)")
      ->delimiter(',');
  cmd->add_option("-d,--depth", a->depths, "Decode tests: context lengths in tokens (e.g. 512,8192,131072)")
      ->delimiter(',');
  cmd->add_option("--verify", a->verify, "Round time for T tokens fed at once at each depth (e.g. 1,2,4,8)")
      ->delimiter(',');
  cmd->add_option("--spec-rounds", a->spec_rounds,
                  "Time whole speculative rounds with K MTP drafts (e.g. 3): the draft head's passes, the verify "
                  "pass with checkpoints, going back; tok/s computed at the reference acceptance rates")
      ->delimiter(',');
  cmd->add_flag("--verify-checkpoints", a->verify_checkpoints,
                "Verify rounds keep the recurrent state after each token, as speculative decoding's do (--spec)");
  cmd->add_option("-n,--n-gen", a->n_gen, "Decode rounds timed per run")->check(CLI::PositiveNumber);
  cmd->add_option("-r,--repetitions", a->reps, "Runs per configuration")->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-style", a->styles, "code and/or zh (Chinese prose), e.g. code,zh")
      ->delimiter(',')
      ->check(CLI::IsMember({"code", "zh"}));
  cmd->add_option("--fill", a->fill,
                  "How decode contexts are filled: synthetic (random K/V and states, cheap) or prefill")
      ->check(CLI::IsMember({"synthetic", "prefill"}));
  cmd->add_option("--json", a->json_out, "Append every raw sample as a JSON line to this file");
  cmd->add_option("--md", a->md_out, "Append the markdown tables to this file");
  cmd->add_option("-b,--batch-size", a->n_batch, "Prompt tokens per forward pass (default: as `serve`, 2048 on a GPU, 256 on the CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--profile-ops", a->profile_ops, "Per-op tables of decode rounds and of one prefill per prompt length (also VI_PROFILE_OPS=1)");
  cmd->add_option("--profile-rounds", a->profile_rounds, "Rounds averaged in the per-op table")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--trace-kernels", a->trace_kernels,
                "Per-kernel table of decode rounds from a CUPTI kernel trace (GPU; libcupti loaded at run time, "
                "VI_CUPTI=path; also VI_TRACE_KERNELS=1)");
  cmd->add_option("--trace-rounds", a->trace_rounds, "Decode rounds in the kernel trace")->check(CLI::PositiveNumber);
  cmd->add_option("--trace-tokens", a->trace_tokens,
                  "Tokens per traced round, comma-separated (1: decode rounds; 4: the verify rounds of --verify 4); "
                  "one kernel table each (default 1)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  cmd->add_option("--sms", a->sms,
                  "CUDA: run the graphs (decode and verify rounds) on N SMs of the card, the kernels sized for them: "
                  "a proxy of a card with more bandwidth per SM (MBU stays against this card's copy rate; prefill "
                  "runs outside graphs, on every SM)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--bandwidth-gbs", a->bandwidth_gbs, "Copy bandwidth for MBU (default: measured now)");
  cmd->add_option("--peak-tflops", a->peak_tflops, "Tensor-core rate for MFU (default: measured now with cuBLAS)");
  cmd->callback([a] {
    BenchArgs args = *a;
    if (const char* e = std::getenv("VI_PROFILE_OPS"); e && std::string(e) == "1") args.profile_ops = true;
    if (const char* e = std::getenv("VI_TRACE_KERNELS"); e && std::string(e) == "1") args.trace_kernels = true;
    if (args.prompt_lens.empty() && args.depths.empty()) args.prompt_lens = {512};
    if (args.depths.empty()) args.depths = args.prompt_lens;  // as before -d existed: decode after each prompt
    Bench(args).run();
  });
}

}  // namespace vi::cli
