// Tensor: a typed, contiguous, row-major view of memory on one device.
// Shapes are written outermost first (PyTorch order): a weight is [out, in] and a
// batch of activations is [tokens, features]. A quantized tensor's innermost
// dimension is a whole number of blocks. Storage is shared: views keep the owner alive.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace vi {

enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device d);

constexpr int kMaxDims = 4;

class Tensor {
 public:
  Tensor() = default;

  // Allocates uninitialised host memory (64-byte aligned) for the given shape.
  static Tensor empty(DType dtype, std::initializer_list<int64_t> shape);
  static Tensor empty(DType dtype, const std::vector<int64_t>& shape);
  // Wraps memory owned by someone else; `owner` (may be null) is kept alive by the view.
  static Tensor view(DType dtype, const std::vector<int64_t>& shape, void* data,
                     std::shared_ptr<void> owner, Device device = Device::CPU);

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const;  // negative i counts from the end
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + ndim_}; }
  std::string shape_str() const;  // "[49152, 576]"
  int64_t numel() const;
  int64_t cols() const { return ndim_ ? shape_[ndim_ - 1] : 1; }  // innermost dimension
  int64_t rows() const {  // product of the others (not numel / cols: a [0] tensor has one empty row)
    int64_t r = 1;
    for (int i = 0; i + 1 < ndim_; ++i) r *= shape_[i];
    return r;
  }
  size_t row_bytes() const { return dtype_row_bytes(dtype_, cols()); }
  size_t nbytes() const { return row_bytes() * static_cast<size_t>(rows()); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  void* data() const { return data_; }
  template <class T>
  T* ptr() const { return static_cast<T*>(data_); }
  // Pointer to the start of row r (rows over all outer dimensions).
  template <class T = uint8_t>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(data_) + static_cast<size_t>(r) * row_bytes());
  }

  // Same memory, new shape with the same number of elements (contiguous, so always valid).
  Tensor reshape(const std::vector<int64_t>& shape) const;
  // Rows [begin, end) of the outermost dimension, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
  std::string name_;
};

}  // namespace vi
