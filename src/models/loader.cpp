#include "models/loader.h"

#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/quant.h"
#include "ops/copy.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi {

WeightLoader::WeightLoader(const WeightSource& src, std::function<void(size_t, size_t)> progress)
    : src_(src), progress_(std::move(progress)) {
  for (const std::string& n : src_.names()) total_bytes_ += src_.get(n).nbytes();
}

std::string WeightLoader::resolve(const std::string& gguf_name, const std::string& hf_name) const {
  return gguf() ? gguf_name : hf_prefix_ + hf_name;
}

void WeightLoader::touch(const Tensor& t) {
  // Read one byte per page so the mapping is resident before the first token.
  const volatile uint8_t* p = static_cast<const uint8_t*>(t.data());
  size_t n = t.nbytes();
  uint8_t sink = 0;
  for (size_t i = 0; i < n; i += 4096) sink ^= p[i];
  (void)sink;
  done_bytes_ += n;
  if (progress_) progress_(std::min(done_bytes_, total_bytes_), total_bytes_);
}

Tensor WeightLoader::load(const std::string& gguf_name, const std::string& hf_name,
                          const std::vector<int64_t>& shape) {
  std::string name = resolve(gguf_name, hf_name);
  Tensor t = src_.require(name, shape);
  touch(t);
  n_params_ += t.numel();
  bytes_ += t.nbytes();
  return t;
}

std::optional<Tensor> WeightLoader::load_optional(const std::string& gguf_name,
                                                  const std::string& hf_name,
                                                  const std::vector<int64_t>& shape) {
  if (!src_.has(resolve(gguf_name, hf_name))) return std::nullopt;
  return load(gguf_name, hf_name, shape);
}

std::optional<Tensor> WeightLoader::load_optional_exact(const std::string& name,
                                                        const std::vector<int64_t>& shape) {
  if (!src_.has(name)) return std::nullopt;
  Tensor t = src_.require(name, shape);
  touch(t);
  n_params_ += t.numel();
  bytes_ += t.nbytes();
  return t;
}

Tensor WeightLoader::load_f32(const std::string& gguf_name, const std::string& hf_name,
                              const std::vector<int64_t>& shape) {
  return to_f32(load(gguf_name, hf_name, shape));
}

void WeightLoader::finish() {
  if (progress_) progress_(total_bytes_, total_bytes_);
}

namespace {

// The token embedding is read by row lookups, not by matmul, so it keeps its file layout
// (also when the output head is tied to it: the head then reads the file layout too).
bool is_token_embedding(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("token_embd.weight") || ends_with("embed_tokens.weight");
}

}  // namespace

void to_device(ops::Context& ctx, std::initializer_list<Tensor*> ts) {
  if (ctx.device == Device::CPU) return;
  for (Tensor* t : ts) {
    if (t->data() == nullptr) continue;
    *t = ops::upload(ctx, *t);
    // Every other 2-D weight is a matmul weight: repacked once here into the layout the
    // device's GEMV reads fastest (ops/prepare_matmul_weight.h; unchanged where it has none).
    if (t->ndim() == 2 && !is_token_embedding(t->name())) *t = ops::prepare_matmul_weight(ctx, *t);
  }
}

void to_device_stacked(ops::Context& ctx, Tensor& stack, std::initializer_list<Tensor*> parts, ops::MatmulInput input,
                       ops::MatmulUse use) {
  if (stack.data() == nullptr) return;
  if (ctx.device != Device::CPU) {
    std::vector<int64_t> rows;
    for (const Tensor* t : parts) rows.push_back(t->dim(0));
    stack = ops::prepare_matmul_weight(ctx, ops::upload(ctx, stack), rows, input, use);
  }
  if (dtype_info(stack.dtype()).row_tile == 0) {  // rows out of order: no part is a view
    for (Tensor* t : parts) {
      std::string name = t->name();
      *t = Tensor();
      t->set_name(std::move(name));
    }
    return;
  }
  stacked_views(stack, parts);
}

void zero_fill(ops::Context& ctx, Tensor& t) {
  if (t.data() == nullptr || t.nbytes() == 0) return;
  if (t.device() == Device::CPU) {
    std::memset(t.data(), 0, t.nbytes());
    return;
  }
  // No fill op yet: copy zeros from the host (states are small and reset rarely).
  Tensor z = Tensor::empty(t.dtype(), t.shape());
  std::memset(z.data(), 0, z.nbytes());
  Tensor dz = ops::upload(ctx, z);
  ops::copy(ctx, dz, t);
  ops::synchronize(ctx);  // z (host) and dz must outlive the copy
}

Tensor logits_to_host_f32(ops::Context& ctx, const Tensor& logits) {
  if (logits.device() == Device::CPU && logits.dtype() == DType::F32) return logits;
  Tensor host = ops::download(ctx, logits);
  return host.dtype() == DType::F32 ? host : to_f32(host);
}

Tensor to_f32(const Tensor& t) {
  VI_CHECK(t.device() == Device::CPU, "to_f32 needs a host tensor");
  Tensor out = Tensor::empty(DType::F32, t.shape());
  out.set_name(t.name());
  for (int64_t r = 0; r < t.rows(); ++r) dequantize_row(t.dtype(), t.row(r), out.row<float>(r), t.cols());
  return out;
}

Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& idx) {
  Tensor out = Tensor::empty(t.dtype(), {static_cast<int64_t>(idx.size()), t.cols()});
  out.set_name(t.name());
  size_t rb = t.row_bytes();
  for (size_t r = 0; r < idx.size(); ++r) {
    VI_CHECK(idx[r] >= 0 && idx[r] < t.rows(), "row index {} out of range for {}", idx[r], t.shape_str());
    std::memcpy(out.row(static_cast<int64_t>(r)), t.row(idx[r]), rb);
  }
  return out;
}

Tensor slice_cols(const Tensor& t, int64_t c0, int64_t c1) {
  VI_CHECK(t.device() == Device::CPU && t.ndim() == 2 && 0 <= c0 && c0 < c1 && c1 <= t.cols(),
           "slice_cols: columns [{}, {}) of {} (host 2-D tensors only)", c0, c1, t.shape_str());
  const int block = dtype_info(t.dtype()).block_elems;
  VI_CHECK(c0 % block == 0 && c1 % block == 0,
           "slice_cols: columns [{}, {}) of a {} tensor {} do not start and end at its blocks of {} values", c0, c1,
           dtype_name(t.dtype()), t.name(), block);
  Tensor out = Tensor::empty(t.dtype(), {t.rows(), c1 - c0});
  out.set_name(t.name());
  const size_t skip = dtype_row_bytes(t.dtype(), c0), rb = out.row_bytes();
  for (int64_t r = 0; r < t.rows(); ++r) std::memcpy(out.row(r), t.row(r) + skip, rb);
  return out;
}

Tensor concat_rows(const std::vector<const Tensor*>& parts) {
  VI_CHECK(!parts.empty(), "concat_rows of nothing");
  const Tensor& first = *parts.front();
  int64_t rows = 0;
  for (const Tensor* t : parts) {
    VI_CHECK(t->device() == Device::CPU && t->dtype() == first.dtype() && t->cols() == first.cols(),
             "concat_rows: {} {} does not stack under {} {}", t->shape_str(), dtype_name(t->dtype()),
             first.shape_str(), dtype_name(first.dtype()));
    rows += t->rows();
  }
  Tensor out = Tensor::empty(first.dtype(), {rows, first.cols()});
  uint8_t* dst = out.row(0);
  for (const Tensor* t : parts) {
    std::memcpy(dst, t->data(), t->nbytes());
    dst += t->nbytes();
  }
  return out;
}

void stacked_views(const Tensor& stack, std::initializer_list<Tensor*> parts) {
  int64_t r = 0;
  for (Tensor* t : parts) {
    const int64_t rows = t->dim(0);
    std::string name = t->name();
    *t = stack.slice_rows(r, r + rows);
    t->set_name(std::move(name));
    r += rows;
  }
  VI_CHECK(r == stack.dim(0), "stacked_views: {} rows of parts for the {} rows of {}", r, stack.dim(0), stack.name());
}

Tensor permute_rows(const Tensor& t, const std::vector<int64_t>& perm) {
  VI_CHECK(static_cast<int64_t>(perm.size()) == t.rows(), "permutation of {} rows for a tensor of {} rows",
           perm.size(), t.rows());
  return gather_rows(t, perm).reshape(t.shape());
}

}  // namespace vi
