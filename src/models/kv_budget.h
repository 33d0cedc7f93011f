// KV pools that are checked against the device's free memory before they are allocated,
// so a context that cannot fit is refused with the numbers and the flags to change
// instead of an allocation failure halfway through.
#pragma once

#include <memory>

#include "models/model.h"

namespace vi {

// A pool of n_blocks blocks of block_size tokens for `n_seqs` sequences of up to `n_ctx`
// tokens (the numbers only go into the message). Throws vi::Error when it cannot fit.
std::shared_ptr<KvPool> new_kv_pool_checked(const Model& model, int64_t n_blocks, int64_t block_size, int64_t n_ctx,
                                            int64_t n_seqs);

// Throws vi::Error when `bytes` of model weights cannot fit in ctx's device memory.
void check_weights_fit(ops::Context& ctx, size_t bytes, const std::string& path);

}  // namespace vi
