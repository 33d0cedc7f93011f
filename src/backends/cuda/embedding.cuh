// CUDA embedding lookup (ops/embedding.h) for every weight dtype; out f32 or f16.
#pragma once

#include "backends/cuda/quant.cuh"
