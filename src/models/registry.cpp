// Architecture dispatch: which model file loads which architecture.
#include "core/error.h"
#include "models/hparams.h"
#include "models/kv_budget.h"
#include "models/llama.h"
#include "models/model.h"
#include "models/qwen3_5.h"
#include "ops/memory.h"

namespace vi {

std::unique_ptr<Model> load_model(const WeightSource& src, const LoadOptions& opts) {
  std::string arch = model_arch(src);
  if (opts.ctx.device != Device::CPU) {
    size_t bytes = 0;
    for (const std::string& name : src.names()) bytes += src.get(name).nbytes();
    ops::Context ctx = opts.ctx;
    check_weights_fit(ctx, bytes, src.path());
  }
  std::unique_ptr<Model> model;
  if (arch == "llama" || arch == "qwen2" || arch == "qwen3") model = load_llama(src, opts);
  else if (arch == "qwen3_5") model = load_qwen3_5(src, opts);
  else
    throw Error(fmt::format("{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3, qwen3_5)",
                            src.path(), arch));
  // The decode GEMVs read weights before waiting for the kernel launched ahead of them
  // (backends/cuda/pdl.cuh): every weight prepared on the device is complete before the
  // model is used. Once per load, not per tensor.
  ops::Context ctx = opts.ctx;
  ops::synchronize(ctx);
  return model;
}

}  // namespace vi
