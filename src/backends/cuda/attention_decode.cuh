// Split-KV decode attention over a paged (or contiguous) KV cache, for T = 1..8 query
// tokens per sequence (plain decode and MTP verification).
//
// Grid: (split, kv head). A block reads its slice of the keys of one KV head once and
// scores every query row that reads that head — all Hq / Hkv query heads of the group and
// all T tokens (R = T * group rows) — so a KV row is read from memory once per step, not
// once per query head. Splits are sized from the context length and the SM count; each
// block leaves an unnormalised partial (running max, running sum, accumulator) and a
// second kernel combines the splits (skipped when one split covers the context).
//
// K/V: f32, f16, or i8 with a per-(row, kv head) f32 scale (value = scale * int8); i8 K
// rows hold Hadamard-rotated keys (ops/kv_quant.h), so the kernel rotates the queries the
// same way and q·k is unchanged. sm_70 features (plain loads, shuffles, fp32 FMA; WMMA in
// the tensor-core kernels) except the tensor-core ring kernel (cp.async, sm_80+), which only
// the native profile takes. Split kernels: CUDA cores (every dtype; cost grows with the
// rows) and tensor cores (f16 queries; cost nearly flat in the rows; register-prefetch or
// cp.async ring), chosen per call by the row count, the key bound and the pool dtypes.
// This header is plain C++ (no CUDA types), so host code and tests can include it.
#pragma once

#include <cstdint>

#include "backends/cuda/paged_kernel_args.h"
#include "ops/registry.h"

namespace vi::cuda {

constexpr int kDecodeMaxT = 8;      // query tokens per sequence the split kernel takes
constexpr int kDecodeMaxRows = 64;  // T * (Hq / Hkv) rows per block
constexpr int kDecodeMaxDim = 256;  // head_dim: 8 dims per lane

// Whether decode_attention takes this shape (the caller falls back otherwise).
bool decode_attention_fits(int64_t T, int64_t Hq, int64_t Hkv, int64_t D);

// The paged kernel arguments (paged_kernel_args.h) with K/V f32, f16 or i8 and two
// additions: a null table means key s is row s, and without device positions (q_pos null)
// query t sits at q_pos0 + t; kv_bound 0 means q_pos0 + T. Splits past the true length
// contribute nothing.
struct DecodeArgs : PagedKernelArgs {
  int64_t q_pos0 = 0;
  int n_splits = 0;  // 0: chosen from the key bound and the SM count
  // [T, Hq, D] like out, or null: the output gate of ops::paged_attention (out = attention ·
  // sigmoid(gate)), which decode_attention applies where its fast combine stores out.
  const void* gate = nullptr;
};
// Returns whether it applied a.gate (false without one): the fast combine folds it into its
// stores, with sigmoid_mul's arithmetic on out's rounded value, so the same bits; a call of one
// split, the other combine or decode_gate_fused() off leaves it to the caller (sigmoid_mul).
bool decode_attention(const ops::Context& ctx, const DecodeArgs& a);
// Whether the fast combine applies the output gate: on unless VI_DECODE_GATE=0 (read once);
// set_decode_gate_fused(1 / 0) forces it for tests, -1 restores that default. Process-wide.
bool decode_gate_fused();
void set_decode_gate_fused(int on);
// Calls of decode_attention that applied their gate so far (host count; tests).
uint64_t decode_gate_fused_calls();

// Tensor-core split kernels (attention_decode_tc.cu, the warp-split ones in
// attention_decode_tc_warps.cu): f16 queries, f16 or i8 K/V, the same
// semantics as the CUDA-core one. decode_attention sends a call there when it fits and
// either T * (Hq / Hkv) >= decode_tc_min_rows() (verification: the CUDA-core kernel's cost
// grows with the rows) or the key bound is >= decode_tc_min_keys(warps): with the warp-split
// kernel (warps: decode_tc_warps_fits) from kDecodeTcMinKeysWarpsDefault keys, i.e. always
// (H200, 27B shape, i8, T = 1: 11.8 / 13.3 / 14.2 us a layer at 512 / 2048 / 4096 keys against
// 48.8 / 50.5 / 51.1 for the CUDA-core kernel; the decode round at those contexts 6.80 -> 6.18
// ms), else from kDecodeTcMinKeysDefault (the register and ring kernels; at 8K, T = 1, native:
// i8 54.1 -> 43.4 us, f16 49.0 -> 30.6 us; the volta profile's i8 register kernel measured
// 56.4 there, 4% slower, and 41 against 49 us below 8K on the H200, not measured on a V100);
// the rest stays on CUDA cores (exact fp32 math, which the f32-activation wiring checks rely
// on). Measured: docs/notes/decode_attention.md.
constexpr int kDecodeTcMinRowsDefault = 9;
constexpr int64_t kDecodeTcMinKeysDefault = 8192;
constexpr int64_t kDecodeTcMinKeysWarpsDefault = 0;
int decode_tc_min_rows();
int64_t decode_tc_min_keys(bool warps);
// Tests and benchmarks: force a path (rows 1: every call that fits; rows INT_MAX and keys
// INT64_MAX: none). set_decode_tc_min_keys sets both key thresholds; reset_decode_tc_min_keys
// restores their defaults (VI_DECODE_TC_MIN_KEYS=N in the environment, read once, replaces
// both defaults: N = 8192 is the routing before the warp-split kernel took short contexts).
// Process-wide.
void set_decode_tc_min_rows(int rows);
void set_decode_tc_min_keys(int64_t keys);
void reset_decode_tc_min_keys();
// Whether decode_attention runs this call on a tensor-core split kernel (else CUDA cores).
bool decode_tc_takes(const ops::Context& ctx, const DecodeArgs& a);
bool decode_tc_fits(const DecodeArgs& a);
// Which tensor-core split kernel: the cp.async ring kernel (sm_80 instructions: only on the
// native profile with sm_80 code, sm80_code(); 16-byte aligned pools, D a multiple of 16 for
// i8 / 8 for f16; f16/f16, i8/i8 or i8 K + f16 V; its shared memory within the device's) or
// the register-prefetch one (sm_70 features: the volta profile, the CUDA 11.8 build).
// kAuto takes the ring kernel for i8 K and V only: on the H200 it was faster there (T = 1,
// 128K: 255 against 284 us) and slower over f16 pools (235 against 207 us);
// docs/notes/decode_attention.md. kAlways / kNever force it where it fits / never (tests,
// benchmarks). Process-wide.
enum class DecodeTcRing { kAuto, kAlways, kNever };
void set_decode_tc_ring(DecodeTcRing mode);
DecodeTcRing decode_tc_ring();
bool decode_tc_ring_fits(const ops::Context& ctx, const DecodeArgs& a);
// The warp-split tensor-core kernel (sm_80 mma.sync and cp.async: native profile with sm_80
// code): i8 K and V, D a multiple of 16, 16-byte aligned pools.
// Each warp streams its own keys with its own running max and O in registers, so its key
// loop has no block barrier; decode_split_tc takes it before the ring kernel when it fits.
// kAuto takes it where it fits (kDecodeTcWarpsByDefault): on the H200 (2026-11-30, one layer
// Hq 24, Hkv 4, D 256, i8 K and V, graph us) it beat the ring kernel at every point that
// fits: 8K T = 1 43.7 -> 24.5, T = 2 46.6 -> 26.9; 128K T = 1 257.3 -> 111.7 (2441 GB/s),
// T = 2 260.3 -> 115.1; docs/notes/decode_attention.md. kAlways / kNever force it where it
// fits / never (tests, benchmarks). Process-wide.
// Rows: a block holds RT row tiles of 16 (decode_tc_warps_tiles). RT 1 is the kernel as
// first measured: each warp its own keys and all 16 rows. RT 2 and 4: the warps form
// 4 / RT streams of RT warps, a stream's warps read the same slots of K/V, each scoring its
// own tile, so K/V is read once for up to 32 / 64 rows. More rows than 16 * RT are cut into
// row groups of whole tokens (decode_tc_warps_group_tokens: floor(16 * RT / G)), one block
// each, the groups of a split in adjacent blocks; each group reads the split's K/V again.
// On the H200 (2026-11-30 00:20, same shape) RT 1 in 2 groups beat the ring kernel at T = 4
// (8K 68.2 -> 41.0, 128K 306.5 -> 217.3 us) but 4 groups lost at 128K T = 8 (377.5 -> 415.0;
// 8K: 96.5 -> 71.5); the shared tiles (RT 2 for T = 3..5, RT 4 for T = 6..8 at G 6) are
// predicted at 115-135 us (T = 4) and 140-200 us (T = 8) at 128K, not yet measured:
// docs/notes/decode_attention.md. kAuto takes at most kDecodeTcWarpsMaxGroups groups with the
// tiles kAuto picks (RT = the row tiles the call needs, rounded up to 1, 2 or 4, at most
// kDecodeTcWarpsAutoMaxTiles); kAlways takes any count.
enum class DecodeTcWarps { kAuto, kAlways, kNever };
constexpr bool kDecodeTcWarpsByDefault = true;
constexpr int64_t kDecodeTcWarpsMaxGroups = 2;
constexpr int64_t kDecodeTcWarpsAutoMaxTiles = 4;
void set_decode_tc_warps(DecodeTcWarps mode);
DecodeTcWarps decode_tc_warps();
bool decode_tc_warps_fits(const ops::Context& ctx, const DecodeArgs& a);
// Row tiles per block of the warp-split kernel: kAuto (above), or forced to 1, 2 or 4 for
// every call the kernel takes (tests, benchmarks: A/B of the variants). Process-wide.
enum class DecodeTcWarpsTiles { kAuto, k1, k2, k4 };
void set_decode_tc_warps_tiles(DecodeTcWarpsTiles tiles);
DecodeTcWarpsTiles decode_tc_warps_tiles_mode();
// The row tiles per block (1, 2 or 4) the warp-split kernel runs this shape with, tokens per
// row group (min(floor(16 * tiles / G), T); 0 where G > 16 * tiles) and the number of groups
// (ceil(T / that); 1 where T * G <= 16 * tiles).
int64_t decode_tc_warps_tiles(const DecodeArgs& a);
int64_t decode_tc_warps_group_tokens(const DecodeArgs& a);
int64_t decode_tc_warps_groups(const DecodeArgs& a);

// Rows of the narrow slot step (DecodeTuning::narrow_rows): the mma's n dimension.
constexpr int64_t kDecodeNarrowRows = 8;
// Short-context tuning of the split plan, the warp-split kernels and the combine (H200, 27B
// shape, i8 K/V: at 8K a layer's attention cost ~29 us, kernel 20.7 + combine 8.1, where the
// K/V stream needs ~4-6; docs/notes/decode_attention.md, "Short contexts"). Each piece can be
// turned off on its own so the old path can be timed in the same process (bench, tests):
// - balanced_splits: the warp-split kernels spread the TRUE key count (read from the device
//   position) over their n_splits blocks, split s taking keys [s n / n_splits, (s + 1) n /
//   n_splits); off: split s takes [s keys_per_split, +keys_per_split) of the host's key
//   bound, so with a recorded step's bound (the length rounded up to a power of two) up to
//   half the splits are empty while the others do twice the work.
// - fast_combine: the combine kernel that issues all of a thread's split loads at once
//   (threads spread over the splits as well as the head dims, one merge in shared memory);
//   off: the one-block-per-row kernel whose threads walk every split in turn.
// - pdl: the warp-split kernels wait for their predecessor with griddepcontrol (pdl_wait) and
//   are launched through pdl_launch, and allow the combine to launch early (pdl_trigger);
//   with one split no partial buffer is allocated, so no memory node separates them from the
//   kernel before (decode_graph.md: a non-kernel node gets no programmatic overlap).
// - lean_share_step: the shared-slot warp-split kernels (2 or 4 row tiles per block: T >= 3
//   of the 27B shape; T = 1, 2 keep the one-tile kernel either way) run a slot step with fewer
//   instructions per key: Q stored in mma A-fragment order (one 16-byte shared load per
//   k-step, no register moves), each thread's block-table loads for a refill issued before
//   the stream barrier and its copies unrolled without guards, and a row's running max
//   moved only when a slot's max exceeds it by more than 2^6 (so O is rarely rescaled; the
//   softmax is the same, P may reach 64). Off: the step measured on 2026-11-30 (H200, 128K
//   T = 4: 171.7 us); docs/notes/decode_attention.md, "Lean slot step".
// - narrow_rows: where a block's rows fit in 8 (T * G <= kDecodeNarrowRows, one row tile:
//   T = 1 of the 27B shape), the one-tile warp-split kernel puts the rows in the mma's n
//   dimension (S^T = K·Q^T, O^T += V^T·P^T): half the HMMA per key and half O's registers of
//   the 16-row step; off: the 16-row step for these calls too.
// - pre_wait_copies: the warp-split kernels start the copies of their slots whose keys
//   all precede the step's first new token before pdl_wait (those K/V rows, the position and
//   the block table are written by no kernel of the step), so their latency overlaps the K/V
//   write kernel before it; off: every copy after the wait.
// - split_v (with lean_share_step; 2 row tiles at D 129..256, every row group over 16 rows:
//   T = 3..5 of the 27B shape): the two warps of a stream hand each other their P fragments
//   through shared memory, and each multiplies half the head dims for both tiles' rows, so each
//   converts half of a slot's V bytes instead of all of them; the same bits as the lean step.
//   Off: the lean step, measured on 2026-12-06 (H100, 128K T = 4: 152.4 against 146.6 us a
//   layer); docs/notes/decode_attention.md, "Split V".
// - split_k (with split_v): the split-V step's warps also split S: each converts half of a slot's
//   K bytes and multiplies them with both tiles' Q, and the pair adds its partial S through shared
//   memory at a second barrier a slot (S summed in another order: not the lean step's bits).
//   Off unless VI_DECODE_SPLIT_K=1 (measured 2026-12-06 on an H100: a tie with split_v alone).
// - run_copies: where a slot's 16 keys are 16 consecutive pool rows (no block table, or pool
//   blocks of a power of two >= 16 keys), the one-tile kernel's 16-row step (T = 2 of the 27B
//   shape) and the shared-slot kernels' lean step copy a slot with one table load per thread and
//   rows a fixed stride apart, as the narrow step always does, instead of a table load and a
//   64-bit offset per row and chunk; the same bytes land in the same places (the same bits).
//   Off: the per-row lookup there.
// Defaults: all on but split_k; VI_DECODE_TUNING=0 in the environment (read once per process)
// turns all of them off (the path measured before, for end-to-end A/B), VI_DECODE_NARROW=0
// narrow_rows alone, VI_DECODE_PRE_WAIT=0 pre_wait_copies alone, VI_DECODE_SPLIT_V=0 split_v
// alone, VI_DECODE_RUNS=0 run_copies alone.
struct DecodeTuning {
  bool balanced_splits = true;
  bool fast_combine = true;
  bool pdl = true;
  bool lean_share_step = true;
  bool narrow_rows = true;
  bool pre_wait_copies = true;
  bool split_v = true;
  bool split_k = false;
  bool run_copies = true;
};
// Whether the warp-split kernel (where it takes the call) runs it on the narrow step
// (DecodeTuning::narrow_rows and at most kDecodeNarrowRows rows in one row tile).
bool decode_tc_narrow_takes(const DecodeArgs& a);
// Whether the shared-slot kernel (where the warp-split kernel takes the call with 2 row tiles)
// runs the split-V step: DecodeTuning::split_v with lean_share_step, D 129..256, and every row
// group over 16 rows.
bool decode_tc_split_v_takes(const DecodeArgs& a);
// Whether the warp-split kernel (where it takes the call) copies its slots as runs of 16 pool
// rows: no block table or pool blocks of a power of two >= 16 keys, and the narrow step, or
// DecodeTuning::run_copies on the 16-row step or (with lean_share_step) the shared-slot kernels.
bool decode_tc_runs_take(const DecodeArgs& a);
DecodeTuning decode_tuning();
void set_decode_tuning(const DecodeTuning& t);  // process-wide (tests, benchmarks)

// How decode_attention split the keys: split s covers keys [s * keys_per_split, +keys_per_split);
// part_acc [n_splits, T * Hq, D] and part_ml [n_splits, T * Hq, 2] (f32, device) take the
// partials, or are null when n_splits is 1 and the split kernel writes the output.
struct DecodeSplitPlan {
  int n_splits = 1;
  int64_t keys_per_split = 0;
  float* part_acc = nullptr;
  float* part_ml = nullptr;
  // The warp-split kernels spread the true key count over the n_splits blocks instead (see
  // DecodeTuning::balanced_splits); the other split kernels ignore it.
  bool balanced = false;
};
void decode_split_tc(const ops::Context& ctx, const DecodeArgs& a, const DecodeSplitPlan& plan);

}  // namespace vi::cuda
