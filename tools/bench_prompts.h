// Deterministic benchmark prompts (BENCHMARK.md): a made-up code base and Chinese prose,
// generated from templates so the same arguments always give the same tokens.
#pragma once

#include <cstdint>
#include <string>

namespace vi::cli {

// At least `min_chars` characters of text in the given style ("code" or "zh").
std::string bench_text(const std::string& style, size_t min_chars);

}  // namespace vi::cli
