// Collectives among the ranks of one tensor-parallel group. Each rank runs on a thread of its
// own and calls every collective in the same order with tensors of the same shape and dtype;
// a call returns on a rank once that rank's output is complete. Sums are added in rank order
// (rank 0 + rank 1 + ...) in f32 and rounded once to the tensor's dtype, so every rank holds the
// same bits and a run does not depend on which rank came first.
//
// A rank that fails must not leave the others waiting: abort() ends every collective in
// progress and every later one with an error naming the cause, until reset(). A rank that does
// not arrive within the timeout aborts the group the same way, naming the ranks that are late.
//
// `stream` is the rank's queue (a cudaStream_t on a GPU, null on the CPU). A host communicator
// finishes the collective before it returns and reports errors by throwing there. A device
// communicator queues kernels on the stream and returns at once (so a recorded step can hold
// them); what those kernels find (a mismatch, a late rank, an abort) is raised by check() once
// the stream has been synchronised.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace vi::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int world() const = 0;
  virtual const char* name() const = 0;
  // x: as many elements of one dtype (f32, f16 or bf16) on every rank. Leaves the elementwise sum over
  // ranks in every rank's x.
  virtual void all_reduce_sum(int rank, Tensor& x, void* stream) = 0;
  // part: [rows, c_rank] (c may differ between ranks, rows may not). Every rank that passes an
  // out ([rows, sum of c], part's dtype) gets the parts side by side in rank order; a rank that
  // passes null only contributes (a root-only gather: the logits the sampler reads).
  virtual void all_gather_cols(int rank, const Tensor& part, Tensor* out, void* stream) = 0;
  // Throws the first error a queued collective reported on the device (a device communicator;
  // call after synchronising the rank's stream). A host communicator has nothing queued.
  virtual void check() {}
  // Ends every collective in progress and to come with vi::Error("... <why>").
  virtual void abort(const std::string& why) = 0;
  // After every rank has left its collectives (their threads joined): ready for use again.
  virtual void reset() = 0;
};

// Ranks that share the host's memory (CPU ranks: threads of one process). A collective reads
// the other ranks' tensors in place: the all-reduce has each rank sum its own slice of the
// tensor over all ranks (a reduce-scatter), then copy the other slices from their owners.
std::unique_ptr<Communicator> make_host_communicator(
    int world, std::chrono::milliseconds timeout = std::chrono::milliseconds(300000));

}  // namespace vi::parallel
