// CUDA bias add over rows (ops/bias.h): out[r, :] = x[r, :] + bias[:], bias f32.
#pragma once

#include "backends/cuda/cuda_util.cuh"
