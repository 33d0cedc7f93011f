#include "core/weights.h"

#include "core/error.h"

namespace vi {

const Tensor& WeightSource::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const Tensor& t = get(name);
  if (t.shape() != shape) {
    Tensor expect = Tensor::view(t.dtype(), shape, nullptr, nullptr);
    throw FormatError(fmt::format("{}: tensor '{}' has shape {} but the model's configuration needs {}",
                                  path(), name, t.shape_str(), expect.shape_str()));
  }
  return t;
}

}  // namespace vi
