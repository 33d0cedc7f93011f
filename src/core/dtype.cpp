#include "core/dtype.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/error.h"

namespace vi {

namespace {
constexpr DTypeInfo kInfo[] = {
    {"f32", 1, 4, false},
    {"f16", 1, 2, false},
    {"bf16", 1, 2, false},
    {"i32", 1, 4, false},
    {"i8", 1, 1, false},
    {"q8_0", kQK, sizeof(BlockQ8_0), true},
    {"q4_0", kQK, sizeof(BlockQ4_0), true},
    {"q4_1", kQK, sizeof(BlockQ4_1), true},
    {"q4_k", kQKK, sizeof(BlockQ4_K), true},
    {"q5_k", kQKK, sizeof(BlockQ5_K), true},
    {"q6_k", kQKK, sizeof(BlockQ6_K), true},
    {"q8_0r", 8 * kQK, sizeof(BlockQ8_0R), true},
    {"q4_kr", 4 * kQKK, sizeof(BlockQ4_KR), true},
    {"q4_kt", kQKK, kQ4ktUnitBytes / kTiledRows, true, kTiledRows},
    {"q8_0t", kQK, sizeof(BlockQ8_0), true, kTiledRows},
    {"q4_ki", kQKK, kQ4ktUnitBytes / kTiledRows, true, kTiledRows},
    {"q4_kts", kQKK, kQ4ktUnitBytes / kTiledRows, true, 0},
    {"q8_kx", kQKK, sizeof(BlockQ8_KX), true},
    {"i64", 1, 8, false},
};
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(DType::kCount));
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  VI_CHECK(i < static_cast<size_t>(DType::kCount), "invalid dtype id {}", i);
  return kInfo[i];
}

DType dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    if (lower == kInfo[i].name) return static_cast<DType>(i);
  }
  VI_FAIL("unknown dtype '{}' (known: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)", name);
}

DType dtype_file_form(DType t) {
  switch (t) {
    case DType::Q8_0R:
    case DType::Q8_0T: return DType::Q8_0;
    case DType::Q4_KR:
    case DType::Q4_KT:
    case DType::Q4_KI:
    case DType::Q4_KTS: return DType::Q4_K;
    default: return t;
  }
}

size_t dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  VI_CHECK(n >= 0 && n % info.block_elems == 0,
           "a row of {} values is not a whole number of {} blocks ({} values each)", n, info.name,
           info.block_elems);
  return static_cast<size_t>(n / info.block_elems) * static_cast<size_t>(info.block_bytes);
}

}  // namespace vi
