// CUDA tensor copy (ops/copy.h): a device-to-device byte copy of contiguous storage.
#pragma once

#include "backends/cuda/cuda_util.cuh"
