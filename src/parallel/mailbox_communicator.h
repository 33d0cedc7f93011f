// Collectives among GPU ranks through a mailbox (DESIGN.md, "Multi-GPU"): each rank copies its
// part into a slot that every rank can read, raises a flag, waits for the other ranks' flags and
// reads their slots — all inside one kernel on the rank's stream. Nothing returns to the host in
// between, so a recorded decode step (a CUDA graph) holds its collectives, and the sums are the
// host communicator's bits: rank 0 + rank 1 + ... in f32, rounded once.
//
// Where the mailbox lives decides which machines it serves:
// - kDevice: one buffer in the memory of the ranks' one GPU (several ranks on one GPU: how a
//   one-GPU machine tests a split model);
// - kHost: pinned host memory that every GPU maps (any GPUs, also where peer-to-peer is broken or
//   absent; each round trip crosses PCIe);
// - kPeer: each rank's slot in its own GPU's memory, read by the others over NVLink or PCIe
//   peer-to-peer (needs peer access between every pair; refused where the driver denies it).
//
// Each flag counts the collectives its rank has finished, so the words only grow and a replayed
// graph needs no host to number its rounds; two slots a rank, used in turn, let a rank start the
// next collective while a slower one still reads the last. A kernel that waits longer than the
// timeout for a rank, or sees abort(), gives up and records why; every collective queued after it
// returns at once, and check() raises the first cause until reset().
//
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace vi::parallel {

enum class MailboxPlace : uint8_t { kDevice, kHost, kPeer };
const char* mailbox_place_name(MailboxPlace p);

struct MailboxOptions {
  MailboxPlace place = MailboxPlace::kHost;
  std::chrono::milliseconds timeout{300000};
  // Bytes of one rank's slot: a larger all-reduce takes several rounds, a larger all-gather part
  // is refused. 8 MiB holds a 2048-token chunk's third of a 5120-wide f16 residual.
  size_t slot_bytes = size_t{8} << 20;
  // Blocks of a collective kernel; each moves its own share of the tensor under its own flags
  // (no grid-wide barrier), and every rank must use the same count.
  int blocks = 16;
  // The ranks' host threads meet at a barrier before and after queueing each collective kernel,
  // so that whenever a rank's thread is outside a collective, every collective queued by any rank
  // has been queued by all, and queued work can finish without the host. Needed where ranks share
  // a GPU: a rank's thread may block in a call that waits for the GPU (an allocation, a cuBLAS
  // handle's creation) while a partner's collective runs there waiting for it; and streams may
  // share a hardware queue that starts kernels in queue order, where work queued behind one
  // rank's collective could stand in front of the partner's. Default: on where every rank is on
  // one GPU. The environment's VI_MAILBOX_PACE=0 or 1 overrides it. A rank whose thread does not
  // come within the timeout ends the collective with the host barrier's error.
  int pace_host = -1;  // -1: the default, 0: off, 1: on
};

// A communicator of devices.size() ranks; rank r queues its collectives on CUDA device
// devices[r]. Throws vi::Error for a world outside [1, kMaxWorld], a device index that does not
// exist, kDevice over more than one device, kPeer between devices without peer access, or a
// binary built without CUDA.
std::unique_ptr<Communicator> make_mailbox_communicator(const std::vector<int>& devices, const MailboxOptions& opt);

// What make_mailbox_communicator calls: set from a static initialiser of the CUDA build's
// vi_parallel_cuda (an object library, linked whole, like the backends); null without CUDA.
using MailboxFactory = std::unique_ptr<Communicator> (*)(const std::vector<int>&, const MailboxOptions&);
MailboxFactory& mailbox_factory();

}  // namespace vi::parallel
