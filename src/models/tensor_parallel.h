// What a model needs to run split over the ranks of a tensor-parallel group (DESIGN.md,
// "Multi-GPU"): the group (communicator, one thread and one context per rank), and the cuts of
// its weights — column-split projections keep a rank's output rows, row-split ones the matching
// input columns, and the all-reduce after a row-split projection adds the ranks' partial sums.
//
// CPU ranks each have a worker pool of their own (the machine's threads shared out) and share the
// host's memory, so the host communicator serves them. GPU ranks run on the one current GPU so
// far, each on a stream of its own (rank 0 on the caller's), with the mailbox communicator in
// device memory between them: the split path on a one-GPU machine, no faster than one rank. Their
// passes run op by op (a recorded step would have to hold every rank's stream).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/batch.h"
#include "models/dense_blocks.h"
#include "models/model.h"
#include "ops/registry.h"
#include "parallel/communicator.h"
#include "parallel/rank_threads.h"
#include "parallel/shard_plan.h"

namespace vi {

struct TpGroup {
  int world = 1;
  std::vector<std::unique_ptr<ThreadPool>> pools;  // one per rank
  std::vector<ops::Context> ctx;                   // rank r's device, pool and (GPU) stream
  std::unique_ptr<parallel::Communicator> comm;
  std::unique_ptr<parallel::RankThreads> threads;

  // ctx of rank r for one pass: the rank's pool and stream (rank 0: the caller's stream), the
  // caller's switches and op profiler (every rank's ops count: a round's bytes and FLOPs are all
  // the ranks').
  ops::Context pass_ctx(const ops::Context& caller, int r) const;
  // fn(rank's ctx, r) on every rank at once (RankThreads::run). GPU ranks: their streams start
  // after the work queued on the caller's stream (the staged plan), the caller's stream goes on
  // after theirs, and the pass waits for the GPU and raises what the collectives reported.
  void run(const ops::Context& caller, const std::function<void(ops::Context&, int)>& fn) const;
  // Waits for the work queued on every rank's stream (GPU ranks): what ranks allocated and wrote
  // at load (weights, KV pools) is then usable from any stream.
  void synchronize() const;
};

// fn(ctx, r) for every rank of the model's group: where the model is not split (group null) once,
// fn(ctx, 0) on the caller's own context (a recording sees its ops, nothing is copied or
// allocated); else on every rank at once (TpGroup::run).
template <class Fn>
void on_ranks(const TpGroup* group, ops::Context& ctx, Fn&& fn) {
  if (group == nullptr) {
    fn(ctx, 0);
    return;
  }
  group->run(ctx, fn);
}

// A pass's logits from rank r's part of the LM head. Not split (comm null): output_logits into
// *logits. Split: each rank's vocabulary slice, side by side in *logits on the rank that passes it
// (rank 0; null elsewhere): on the CPU host f32; on a GPU gathered in the activation dtype on the
// device, then as `where` asks. n_vocab: the whole vocabulary; out: logits_scratch of the rank's
// slice.
void rank_output_logits(ops::Context& ctx, parallel::Communicator* comm, int r, const BatchPlan& plan, const Tensor& n,
                        const Tensor& lm_head, LogitsOn where, const Tensor& out, int64_t n_vocab, Tensor* logits);

// A group of `world` ranks (world >= 2) on base's device (a GPU: all on the current one).
std::unique_ptr<TpGroup> make_tp_group(const ops::Context& base, int world, const std::string& model_name);

// Rows [r.begin, r.end) of a host matrix (a view: rows are contiguous).
Tensor shard_rows(const Tensor& w, parallel::Range r);
// Columns [c.begin, c.end) of a host matrix (a copy). Where a quantized matrix's blocks do not
// fall on the cut, the slice is kept in f32 instead (the same values, 4 bytes each), with a warning.
Tensor shard_cols(const Tensor& w, parallel::Range c);
// The same for several column ranges, side by side in the order given (the input columns of a
// rank's value heads where they are not contiguous).
Tensor shard_col_runs(const Tensor& w, const std::vector<parallel::Range>& runs);
// The rows listed (a copy; rows r.begin .. r.end - 1 of each range, ranges in order).
Tensor shard_row_runs(const Tensor& w, const std::vector<parallel::Range>& runs);
// 1-D f32 vector's elements [r.begin * width, r.end * width) (a view).
Tensor shard_vector(const Tensor& v, parallel::Range r, int64_t width);

// The MLP rows rank `rank` holds: d_ff split in whole blocks of the down projection's dtype, so
// that shard_cols cuts it without a fallback.
parallel::Range split_mlp(const SwigluWeights& m, int64_t d_ff, int world, int rank);
// Rank's part of a SwiGLU MLP: gate and up rows f (stacked again where the whole was stacked),
// down columns f. Host tensors; to the device after (swiglu_to_device).
SwigluWeights shard_swiglu(const SwigluWeights& m, parallel::Range f);

// One pool whose tensors are the ranks' pools' tensors, rank after rank (rank r's attention
// layer l at index r * n_layers + l); every pool must have the same block count and size.
std::shared_ptr<KvPool> merge_kv_pools(const std::vector<std::shared_ptr<KvPool>>& pools);

}  // namespace vi
