// Emulating a card with more memory bandwidth per SM on the one at hand (benchmarks only): hold
// n of its SMs with a block each that only waits, so that the kernels under test run on the rest.
//
// Why: a decode GEMV must keep bandwidth x latency / SMs bytes in flight on each SM, and issue its
// instructions at the matching rate, to reach the copy rate. An H200 asks 4.2 TB/s of 132 SMs at
// about an H100's clock and load latency; an H100 (3.0 TB/s) with 40 of its 132 SMs held asks the
// same of the 92 left (3.0 / 92 ~ 4.2 / 129 TB/s an SM). DRAM still feeds that many SMs at its
// full rate (docs/notes/gemv.md run 32: 56 SMs of an H200 read 4.4 TB/s), so what a kernel loses
// this way is what it would lose to the faster memory. It is a proxy, not that card: kernels whose
// time is latency spread over every SM (small steps, attention at short context) lose more here,
// on fewer SMs, than on a card with more bandwidth and all of them.
//
// While an occupier exists the device's usable SM count (set_usable_sm_count) is the SMs left, so
// the kernels size their grids (and decode attention its splits) for them; hold() and release()
// bracket the timed work. A holding block takes all the shared memory a block may have (on sm_80
// and newer that and the 1 KB every block reserves fill the SM), so no other block fits beside it;
// hold() checks that with a probe kernel whose blocks record the SM they ran on. Between hold()
// and release() nothing may wait for the whole device (cudaDeviceSynchronize, cudaFree, a kernel
// trace): the holding blocks end when released, or by themselves after `guard_s` seconds, and
// release() then fails (the timed work did not all run with the SMs held).
#pragma once

#include <memory>
#include <vector>

namespace vi::cuda {

// Call before the process first uses CUDA when it will hold SMs: sets CUDA_MODULE_LOADING=EAGER
// and CUDA_DEVICE_MAX_CONNECTIONS=32 where they are not set. A kernel loaded lazily, at its first
// launch (CUDA 12's default), may have to wait until the device is idle, i.e. for the release:
// on an H100 (2026-12-06 20:52) the probe's first launch did, with 33 and 38 SMs held, and ran
// once the same process had loaded it. Streams also share the device's hardware queues (8 by
// default), and a work stream that shares the holding blocks' queue would wait the same way.
void set_sm_occupier_environment();

class SmOccupier {
 public:
  // Whether one block can fill an SM of the current device: every block reserves some shared
  // memory and one may take the rest (sm_80 and newer). On a V100 a block without shared memory
  // fits beside any other, and the constructor refuses.
  static bool supported();
  // n SMs of the current device (0: an occupier that does nothing; n must leave one SM).
  explicit SmOccupier(int n, double guard_s = 60.0);
  ~SmOccupier();  // releases, and gives the kernels every SM again
  SmOccupier(const SmOccupier&) = delete;
  SmOccupier& operator=(const SmOccupier&) = delete;

  int held() const;        // n
  int usable_sms() const;  // the SMs the kernels run on
  std::vector<int> held_sm_ids() const;  // the SMs held (by %smid) while holding; empty otherwise
  // Launches the holding blocks; returns once every one runs on an SM of its own and a probe
  // kernel on work_stream (a cudaStream_t, null: the legacy default stream) ran beside them, on
  // none of their SMs. Throws (after releasing) otherwise, or after 10 s without them, or when
  // the probe has not run within 2 s (the work would wait for the release: see
  // set_sm_occupier_environment).
  void hold(void* work_stream);
  // Lets them go and waits for them; throws if they had ended by their guard before.
  void release();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vi::cuda
