// libFuzzer target: safetensors parsing from memory. Any input must either parse, with
// every tensor view inside the buffer (or a private aligned copy), or throw vi::FormatError.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vi::formats::ByteSource src{data, size, nullptr, "fuzz.safetensors"};
  try {
    vi::formats::SafetensorsFile f = vi::formats::parse_safetensors(src);
    volatile uint8_t sink = 0;
    for (const vi::Tensor& t : f.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    }
  } catch (const vi::FormatError&) {
  }
  return 0;
}
