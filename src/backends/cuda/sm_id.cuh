// The SM a thread runs on (%smid): for code that checks where blocks were placed (sm_occupier.cu
// and its test). Only meaningful while the block runs; ids need not be dense on every GPU.
#pragma once

namespace vi::cuda {

__device__ __forceinline__ int sm_id() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

}  // namespace vi::cuda
