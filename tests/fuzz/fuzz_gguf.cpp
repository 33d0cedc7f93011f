// libFuzzer target: GGUF parsing from memory. Any input must either parse, with every
// tensor view inside the buffer, or throw vi::FormatError; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vi::formats::ByteSource src{data, size, nullptr, "fuzz.gguf"};
  try {
    vi::formats::GgufFile f = vi::formats::parse_gguf(src);
    // Touch every byte a view claims, so ASan sees any view reaching outside the input.
    volatile uint8_t sink = 0;
    for (const vi::Tensor& t : f.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    }
  } catch (const vi::FormatError&) {
  }
  return 0;
}
