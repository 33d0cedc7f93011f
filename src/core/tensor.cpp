#include "core/tensor.h"

#include <cstdlib>

#include "core/error.h"

namespace vi {

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

namespace {
void set_shape(std::array<int64_t, kMaxDims>& dst, int& ndim, const std::vector<int64_t>& shape) {
  VI_CHECK(shape.size() <= kMaxDims, "tensor rank {} exceeds {}", shape.size(), kMaxDims);
  ndim = static_cast<int>(shape.size());
  for (int i = 0; i < ndim; ++i) {
    VI_CHECK(shape[i] >= 0, "negative dimension {}", shape[i]);
    dst[i] = shape[i];
  }
}
}  // namespace

Tensor Tensor::empty(DType dtype, std::initializer_list<int64_t> shape) {
  return empty(dtype, std::vector<int64_t>(shape));
}

Tensor Tensor::empty(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t;
  t.dtype_ = dtype;
  set_shape(t.shape_, t.ndim_, shape);
  size_t bytes = t.nbytes();
  size_t padded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded ? padded : 64);
  VI_CHECK(p != nullptr, "out of host memory allocating {} bytes for a {} tensor", bytes,
           t.shape_str());
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::view(DType dtype, const std::vector<int64_t>& shape, void* data,
                    std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  set_shape(t.shape_, t.ndim_, shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

int64_t Tensor::dim(int i) const {
  if (i < 0) i += ndim_;
  VI_CHECK(i >= 0 && i < ndim_, "dimension {} out of range for rank {}", i, ndim_);
  return shape_[i];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[i];
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  Tensor t = *this;
  set_shape(t.shape_, t.ndim_, shape);
  VI_CHECK(t.numel() == numel(), "cannot reshape {} to {}", shape_str(), t.shape_str());
  VI_CHECK(t.cols() % dtype_info(dtype_).block_elems == 0,
           "reshape to {} splits a {} block", t.shape_str(), dtype_name(dtype_));
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  VI_CHECK(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
           "row slice [{}, {}) out of range for {}", begin, end, shape_str());
  const int tile = dtype_info(dtype_).row_tile;
  VI_CHECK(tile != 0 || (begin == 0 && end == shape_[0]),
           "row slice [{}, {}) of {} {}: its rows are not stored in order, so only the whole matrix is a view", begin,
           end, dtype_name(dtype_), shape_str());
  VI_CHECK(tile == 0 || (ndim_ == 2 ? begin % tile == 0 && end % tile == 0 : tile == 1),
           "row slice [{}, {}) of {} {}: its rows are stored in tiles of {}, so a slice must begin and end at a "
           "multiple of {}",
           begin, end, dtype_name(dtype_), shape_str(), tile, tile);
  Tensor t = *this;
  t.shape_[0] = end - begin;
  size_t outer_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  t.data_ = static_cast<uint8_t*>(data_) + static_cast<size_t>(begin) * outer_bytes;
  return t;
}

}  // namespace vi
