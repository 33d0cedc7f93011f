// CUDA rotary embedding (ops/rope.h): NeoX half-split pairing, partial rot_dim, in place.
#pragma once

#include "backends/cuda/cuda_util.cuh"
