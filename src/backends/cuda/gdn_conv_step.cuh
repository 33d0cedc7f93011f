// CUDA gdn_conv_step (ops/gdn_conv_step.h): one launch for a decode token's GDN conv + SiLU
// of q, k and v and the L2 norm of the q and k heads.
#pragma once

#include "backends/cuda/cuda_util.cuh"
