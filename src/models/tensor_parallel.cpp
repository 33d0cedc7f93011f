#include "models/tensor_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "models/loader.h"
#include "ops/memory.h"
#include "parallel/mailbox_communicator.h"

namespace vi {

ops::Context TpGroup::pass_ctx(const ops::Context& caller, int r) const {
  ops::Context c = caller;
  c.pool = pools[static_cast<size_t>(r)].get();
  if (r > 0) c.stream = ctx[static_cast<size_t>(r)].stream;
  return c;
}

void TpGroup::run(const ops::Context& caller, const std::function<void(ops::Context&, int)>& fn) const {
  ops::Context base = caller;
  std::vector<ops::Context> rc;
  for (int r = 0; r < world; ++r) rc.push_back(pass_ctx(caller, r));
  // Forked and joined here, on the caller's thread: an event that a rank's thread recorded on the
  // caller's stream could land behind rank 0's first collective, which waits for that rank.
  for (int r = 1; r < world; ++r) ops::stream_wait(rc[static_cast<size_t>(r)], base);
  threads->run([&](int r) { fn(rc[static_cast<size_t>(r)], r); });
  if (base.device == Device::CPU) return;
  for (int r = 1; r < world; ++r) ops::stream_wait(base, rc[static_cast<size_t>(r)]);
  ops::synchronize(base);  // a collective that gave up left wrong values: raise it before they are used
  comm->check();
}

void TpGroup::synchronize() const {
  for (const ops::Context& c : ctx) {
    ops::Context k = c;
    ops::synchronize(k);
  }
}

void rank_output_logits(ops::Context& ctx, parallel::Communicator* comm, int r, const BatchPlan& plan, const Tensor& n,
                        const Tensor& lm_head, LogitsOn where, const Tensor& out, int64_t n_vocab, Tensor* logits) {
  if (comm == nullptr) {
    output_logits(ctx, plan, n, lm_head, where, out, *logits);
    return;
  }
  Tensor part, whole;
  if (ctx.device == Device::CPU) {
    output_logits(ctx, plan, n, lm_head, LogitsOn::kHostF32, out, part);
    if (logits != nullptr) whole = Tensor::empty(DType::F32, {part.rows(), n_vocab});
    comm->all_gather_cols(r, part, logits != nullptr ? &whole : nullptr, ctx.stream);
    if (logits != nullptr) *logits = whole;
    return;
  }
  output_logits(ctx, plan, n, lm_head, LogitsOn::kDevice, out, part);
  if (logits != nullptr) whole = ops::empty(ctx, part.dtype(), {part.rows(), n_vocab});  // rank 0: the caller's stream
  comm->all_gather_cols(r, part, logits != nullptr ? &whole : nullptr, ctx.stream);
  if (logits == nullptr) return;
  if (where == LogitsOn::kDevice) {
    *logits = whole;
    return;
  }
  ops::synchronize(ctx);
  comm->check();  // before the host reads what the gather wrote
  *logits = logits_to_host_f32(ctx, whole);
}

namespace {

// How long a rank waits for the others in a collective before the group gives up: 300 s, or
// VI_TP_TIMEOUT_MS (a test that expects a stall sets seconds, not minutes).
std::chrono::milliseconds tp_timeout() {
  const char* env = std::getenv("VI_TP_TIMEOUT_MS");
  if (env == nullptr) return std::chrono::milliseconds(300000);
  const long long ms = std::atoll(env);
  VI_CHECK(ms > 0, "VI_TP_TIMEOUT_MS={}: a positive number of milliseconds", env);
  return std::chrono::milliseconds(ms);
}

}  // namespace

std::unique_ptr<TpGroup> make_tp_group(const ops::Context& base, int world, const std::string& model_name) {
  VI_CHECK(world >= 2 && world <= parallel::kMaxWorld, "tensor parallel over {} ranks: 2 to {} are supported", world,
           parallel::kMaxWorld);
  auto g = std::make_unique<TpGroup>();
  g->world = world;
  const bool gpu = base.device != Device::CPU;
  const ThreadPool& all = base.pool != nullptr ? *base.pool : ThreadPool::global();
  const int per_rank = gpu ? 1 : std::max(1, all.size() / world);  // GPU ranks' host threads only queue work
  for (int r = 0; r < world; ++r) {
    g->pools.push_back(std::make_unique<ThreadPool>(per_rank));
    ops::Context c = base;
    c.pool = g->pools.back().get();
    if (gpu && r > 0) c.stream = ops::new_stream(c);
    g->ctx.push_back(c);
  }
  if (gpu) {
    parallel::MailboxOptions mo;
    mo.place = parallel::MailboxPlace::kDevice;
    mo.timeout = tp_timeout();
    g->comm = parallel::make_mailbox_communicator(std::vector<int>(static_cast<size_t>(world), 0), mo);
    VI_LOG_WARN("{}: --tp {} on a GPU runs every rank on the current GPU (streams of their own, a mailbox in its "
                "memory): the split path, not a speedup; passes run op by op",
                model_name, world);
  } else {
    g->comm = parallel::make_host_communicator(world, tp_timeout());
  }
  g->threads = std::make_unique<parallel::RankThreads>(world, g->comm.get());
  return g;
}

Tensor shard_rows(const Tensor& w, parallel::Range r) {
  Tensor out = w.slice_rows(r.begin, r.end);
  out.set_name(w.name());
  return out;
}

Tensor shard_cols(const Tensor& w, parallel::Range c) { return shard_col_runs(w, {c}); }

Tensor shard_col_runs(const Tensor& w, const std::vector<parallel::Range>& runs) {
  VI_CHECK(w.device() == Device::CPU && w.ndim() == 2 && !runs.empty(), "shard_col_runs: {} (host 2-D tensors only)",
           w.shape_str());
  const int block = dtype_info(w.dtype()).block_elems;
  bool aligned = true;
  for (const parallel::Range& c : runs) aligned = aligned && c.begin % block == 0 && c.end % block == 0;
  Tensor src = w;
  if (!aligned) {
    VI_LOG_WARN("{}: a rank's columns ([{}, {}) ...) cut its {}-value {} blocks; that rank keeps them in f32", w.name(),
                runs.front().begin, runs.front().end, block, dtype_name(w.dtype()));
    src = to_f32(w);
  }
  std::vector<Tensor> parts;
  for (const parallel::Range& c : runs) parts.push_back(slice_cols(src, c.begin, c.end));
  if (parts.size() == 1) return parts.front();
  int64_t cols = 0;
  for (const Tensor& p : parts) cols += p.cols();
  Tensor out = Tensor::empty(src.dtype(), {src.rows(), cols});
  out.set_name(w.name());
  for (int64_t r = 0; r < src.rows(); ++r) {
    uint8_t* dst = out.row(r);
    for (const Tensor& p : parts) {
      std::memcpy(dst, p.row(r), p.row_bytes());
      dst += p.row_bytes();
    }
  }
  return out;
}

Tensor shard_row_runs(const Tensor& w, const std::vector<parallel::Range>& runs) {
  std::vector<int64_t> idx;
  for (const parallel::Range& r : runs)
    for (int64_t i = r.begin; i < r.end; ++i) idx.push_back(i);
  Tensor out = gather_rows(w, idx);
  out.set_name(w.name());
  return out;
}

Tensor shard_vector(const Tensor& v, parallel::Range r, int64_t width) {
  VI_CHECK(v.ndim() == 1 && v.numel() % width == 0, "shard_vector: {} is not a vector of {}-wide groups",
           v.shape_str(), width);
  return v.reshape({v.numel() / width, width}).slice_rows(r.begin, r.end).reshape({r.size() * width});
}

parallel::Range split_mlp(const SwigluWeights& m, int64_t d_ff, int world, int rank) {
  const int64_t block = dtype_info(m.down.dtype()).block_elems;
  return parallel::split_blocks(d_ff, block, world, rank, "MLP blocks");
}

SwigluWeights shard_swiglu(const SwigluWeights& m, parallel::Range f) {
  SwigluWeights s;
  s.gate = shard_rows(m.gate, f);
  s.up = shard_rows(m.up, f);
  s.down = shard_cols(m.down, f);
  if (m.gate_up.data() != nullptr) {
    s.gate_up = concat_rows({&s.gate, &s.up});
    s.gate_up.set_name(m.gate_up.name());
    stacked_views(s.gate_up, {&s.gate, &s.up});
  }
  return s;
}

std::shared_ptr<KvPool> merge_kv_pools(const std::vector<std::shared_ptr<KvPool>>& pools) {
  VI_CHECK(!pools.empty(), "merge_kv_pools of nothing");
  auto out = std::make_shared<KvPool>();
  out->block_size = pools.front()->block_size;
  out->n_blocks = pools.front()->n_blocks;
  const bool scaled = !pools.front()->scales.empty();
  for (const auto& p : pools) {
    VI_CHECK(p->block_size == out->block_size && p->n_blocks == out->n_blocks && p->scales.empty() != scaled,
             "merge_kv_pools: pools of {}x{} and {}x{} blocks", p->n_blocks, p->block_size, out->n_blocks,
             out->block_size);
    out->tensors.insert(out->tensors.end(), p->tensors.begin(), p->tensors.end());
    out->scales.insert(out->scales.end(), p->scales.begin(), p->scales.end());
  }
  return out;
}

}  // namespace vi
