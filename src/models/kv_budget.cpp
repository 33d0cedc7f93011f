#include "models/kv_budget.h"

#include "core/error.h"
#include "ops/device_memory.h"

namespace vi {

namespace {
double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }
}  // namespace

std::shared_ptr<KvPool> new_kv_pool_checked(const Model& model, int64_t n_blocks, int64_t block_size, int64_t n_ctx,
                                            int64_t n_seqs) {
  // One block tells the bytes per block whatever the cache's dtypes and layer mix are.
  auto probe = model.new_kv_pool(1, block_size);
  if (probe->tensors.empty()) return model.new_kv_pool(n_blocks, block_size);  // no attention layers
  size_t per_block = 0;
  for (const Tensor& t : probe->tensors) per_block += t.nbytes();
  for (const Tensor& t : probe->scales) per_block += t.nbytes();  // int8 caches: per-(row, head) scales
  ops::Context ctx;
  ctx.device = probe->tensors.front().device();
  probe.reset();
  // Host memory is not checked: the page cache (the mapped model file) is reclaimable but
  // not reported as free, so the count would refuse caches that fit.
  if (ctx.device == Device::CPU) return model.new_kv_pool(n_blocks, block_size);
  const ops::DeviceMemory mem = ops::device_memory(ctx);
  const double need = static_cast<double>(per_block) * static_cast<double>(n_blocks);
  if (need > static_cast<double>(mem.free)) {
    const double per_token = static_cast<double>(per_block) / static_cast<double>(block_size);
    const int64_t fit_tokens = static_cast<int64_t>(static_cast<double>(mem.free) / per_token);
    VI_FAIL(
        "the KV cache does not fit: {} sequence(s) x {} tokens need {:.2f} GiB ({:.1f} KiB per token) but {} has "
        "{:.2f} GiB free of {:.2f} GiB after the weights. Lower -c/--ctx-size (about {} tokens in all fit) or "
        "-np/--parallel, or store the cache in 8 bits (--cache-type-k/--cache-type-v)",
        n_seqs, n_ctx, gib(need), per_token / 1024.0, mem.name, gib(static_cast<double>(mem.free)),
        gib(static_cast<double>(mem.total)), fit_tokens);
  }
  return model.new_kv_pool(n_blocks, block_size);
}

void check_weights_fit(ops::Context& ctx, size_t bytes, const std::string& path) {
  if (ctx.device == Device::CPU) return;  // weights stay memory-mapped on the host (see above)
  const ops::DeviceMemory mem = ops::device_memory(ctx);
  if (bytes > mem.free) {
    VI_FAIL("{}: the weights need {:.2f} GiB but {} has {:.2f} GiB free of {:.2f} GiB. Use a more quantized "
            "file (e.g. Q4_K) or more GPUs",
            path, gib(static_cast<double>(bytes)), mem.name, gib(static_cast<double>(mem.free)),
            gib(static_cast<double>(mem.total)));
  }
}

}  // namespace vi
