// Model / SequenceState helpers shared by every architecture: sequences with a private
// KV pool (CLI generate/chat/logits/perplexity) and resuming from a cached prefix.
#include "models/model.h"

#include <numeric>

#include "core/error.h"
#include "models/kv_budget.h"

namespace vi {

std::unique_ptr<SequenceState> Model::new_sequence(int64_t n_ctx) const {
  VI_CHECK(n_ctx > 0, "a sequence needs a positive context (got {})", n_ctx);
  const int64_t bs = kDefaultKvBlockSize, n_blocks = (n_ctx + bs - 1) / bs;
  auto seq = new_paged_sequence(n_ctx, new_kv_pool_checked(*this, n_blocks, bs, n_ctx, 1));
  seq->block_table().resize(static_cast<size_t>(n_blocks));
  std::iota(seq->block_table().begin(), seq->block_table().end(), 0);  // private pool: identity
  return seq;
}

void SequenceState::resume_at(int64_t n) {
  const int64_t bs = pool_ ? pool_->block_size : 1;
  VI_CHECK(n >= 0 && n <= capacity_, "cannot resume a sequence of capacity {} at token {}", capacity_, n);
  VI_CHECK(static_cast<int64_t>(block_table_.size()) * bs >= n,
           "cannot resume at token {}: the block table covers only {} tokens", n,
           static_cast<int64_t>(block_table_.size()) * bs);
  n_past_ = n;
}

}  // namespace vi
