// The per-kernel table built from a kernel trace (ops/kernel_timeline.h), on hand-made spans:
// charges add up to the round's span also when kernels overlap (programmatic dependent launch),
// labels carry over only when the traced rounds replay the labelled round's kernels, bytes
// come once per op call, a row of several kernels tells each one's time, and kernel names lose
// their scope and parameters.
#include <gtest/gtest.h>

#include "ops/kernel_timeline.h"

namespace vi {
namespace {

using ops::KernelSpan;

const ops::KernelTimeline::Row* row(const ops::KernelTimeline& t, const std::string& op, const std::string& shape) {
  for (const auto& r : t.rows)
    if (r.op == op && r.shape == shape) return &r;
  return nullptr;
}

const ops::KernelTimeline::Row* by_kernel(const ops::KernelTimeline& t, const std::string& kernels) {
  for (const auto& r : t.rows)
    if (r.kernels == kernels) return &r;
  return nullptr;
}

ops::OpCall call(const char* op, const std::string& shape, double bytes) {
  return ops::OpCall{op, DType::F16, bytes, shape, 0};
}

TEST(KernelTimeline, ShortNames) {
  EXPECT_EQ(ops::short_kernel_name("void vi::cuda::(anonymous namespace)::gemv_q4kr_deep_kernel<2, 4, false>(unsigned "
                                   "char const*, unsigned long, __half const*, __half*, int, long, int, long, unsigned int)"),
            "gemv_q4kr_deep_kernel<2, 4, false>");
  EXPECT_EQ(ops::short_kernel_name("void vi::cuda::add_rms_norm_kernel<__half, (anonymous namespace)::Op>(float*)"),
            "add_rms_norm_kernel<__half, (anonymous namespace)::Op>");
  EXPECT_EQ(ops::short_kernel_name("plain_c_kernel"), "plain_c_kernel");
  EXPECT_EQ(ops::short_kernel_name("ns::k(int)"), "k");
}

// Round: A [0,10], B starts early at 5 and ends at 20 (overlap), C after a gap [25,30].
std::vector<KernelSpan> round_at(uint64_t t0, uint64_t stretch = 1) {
  return {{"A", t0, t0 + 10 * stretch, -1}, {"C", t0 + 25 * stretch, t0 + 30 * stretch, -1},
          {"B", t0 + 5 * stretch, t0 + 20 * stretch, -1}};  // out of order on purpose
}

TEST(KernelTimeline, ChargesAddUpToTheSpan) {
  // Unlabelled: rows by kernel name. Times in ns, rows in µs: scale by 1000.
  auto t = ops::build_kernel_timeline({round_at(1000000, 1000)}, {}, {});
  EXPECT_FALSE(t.labelled);
  ASSERT_EQ(t.rounds, 1);
  EXPECT_DOUBLE_EQ(t.span_us, 30);
  EXPECT_DOUBLE_EQ(t.busy_us, 25);
  EXPECT_DOUBLE_EQ(t.kernels, 3);
  ASSERT_EQ(t.rows.size(), 3u);
  double sum = 0;
  for (const auto& r : t.rows) sum += r.us;
  EXPECT_DOUBLE_EQ(sum, t.span_us);
  const auto* a = by_kernel(t, "A");
  const auto* b = by_kernel(t, "B");
  const auto* c = by_kernel(t, "C");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->op, "(kernel)");
  EXPECT_DOUBLE_EQ(a->us, 10);
  EXPECT_DOUBLE_EQ(b->us, 10);      // 20 - 10: its first half overlapped A
  EXPECT_DOUBLE_EQ(b->own_us, 15);  // its own run, counted in full
  EXPECT_DOUBLE_EQ(b->gap_us, 0);
  EXPECT_DOUBLE_EQ(c->us, 10);      // 30 - 20, of which 5 with nothing running
  EXPECT_DOUBLE_EQ(c->gap_us, 5);
  const std::string md = ops::kernel_timeline_markdown(t);
  EXPECT_NE(md.find("| **round** | | | | 3 | 30.0 | 5.0 |"), std::string::npos) << md;
}

TEST(KernelTimeline, LabelsCarryOverAndAverageOverRounds) {
  // Op calls of the labelled round: a GEMV (one kernel), attention (A then B: two kernels of
  // one call), and a second GEMV of the same class as the first.
  const std::vector<ops::OpCall> calls = {call("matmul", "8x8 T=1", 1000), call("attention", "H=2", 300),
                                          call("matmul", "8x8 T=1", 1000)};
  std::vector<KernelSpan> labelled = {{"G", 0, 5, 0}, {"A", 10, 20, 1}, {"B", 30, 40, 1}, {"G", 50, 55, 2}};
  auto r1 = std::vector<KernelSpan>{{"G", 100000, 102000, -1}, {"A", 102000, 104000, -1},
                                    {"B", 104000, 105000, -1}, {"G", 105000, 108000, -1}};
  auto r2 = r1;
  for (auto& k : r2) k.start_ns += 1000000, k.end_ns += 1000000 + 2000;  // every kernel 2 µs longer
  auto t = ops::build_kernel_timeline({r1, r2, {}}, labelled, calls);     // the empty round is skipped
  ASSERT_TRUE(t.labelled) << t.note;
  EXPECT_EQ(t.rounds, 2);
  const auto* mm = row(t, "matmul", "8x8 T=1");
  const auto* at = row(t, "attention", "H=2");
  ASSERT_TRUE(mm && at);
  EXPECT_EQ(mm->kernels, "G");
  EXPECT_EQ(at->kernels, "A + B");
  EXPECT_DOUBLE_EQ(mm->launches, 2);
  EXPECT_DOUBLE_EQ(at->launches, 2);
  EXPECT_DOUBLE_EQ(mm->bytes, 2000);  // both calls, once each per round
  EXPECT_DOUBLE_EQ(at->bytes, 300);
  EXPECT_EQ(mm->dtype, "f16");
  // Charges from the latest end before each kernel: round 1 ends at 102, 104, 105, 108 µs after
  // 100 -> G 2, A 2, B 1, G 3; round 2 (same starts, every kernel 2 µs longer) ends at 104, 106,
  // 107, 110 -> G 4, A 2, B 1, G 3.
  EXPECT_DOUBLE_EQ(mm->us, (2 + 3 + 4 + 3) / 2.0);
  EXPECT_DOUBLE_EQ(at->us, (2 + 1 + 2 + 1) / 2.0);
  EXPECT_DOUBLE_EQ(t.span_us, (8 + 10) / 2.0);
  // Each kernel of the attention row on its own (A 2 and 2, B 1 and 1), and so in the table.
  ASSERT_EQ(at->kernel_us.size(), 2u);
  EXPECT_DOUBLE_EQ(at->kernel_us[0], 2);
  EXPECT_DOUBLE_EQ(at->kernel_us[1], 1);
  ASSERT_EQ(mm->kernel_us.size(), 1u);
  EXPECT_DOUBLE_EQ(mm->kernel_us[0], mm->us);
  const std::string md = ops::kernel_timeline_markdown(t);
  EXPECT_NE(md.find("| A (2.0 µs) + B (1.0 µs) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| G | 2 |"), std::string::npos) << md;  // one kernel: its name alone
}

TEST(KernelTimeline, LabelsFollowTheCommonKernelsWhenTheRoundsDiffer) {
  const std::vector<ops::OpCall> calls = {call("matmul", "8x8 T=1", 1000), call("attention", "H=2", 300)};
  std::vector<KernelSpan> labelled = {{"G", 0, 5, 0}, {"A", 6, 9, 1}};
  // Nothing in common: no labels.
  auto t = ops::build_kernel_timeline({{{"H", 0, 5, -1}}}, labelled, calls);
  EXPECT_FALSE(t.labelled);
  EXPECT_NE(t.note.find("no kernel matched"), std::string::npos) << t.note;
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].op, "(kernel)");
  EXPECT_EQ(t.rows[0].bytes, 0);
  // An extra kernel (a combine the recorded step launches and the op-by-op round did not): the
  // others keep their labels, the extra one is "(unmatched)".
  auto u = ops::build_kernel_timeline({{{"G", 0, 5, -1}, {"A", 6, 9, -1}, {"C", 10, 12, -1}}}, labelled, calls);
  ASSERT_TRUE(u.labelled);
  EXPECT_NE(u.note.find("1.0 of 3.0 kernels"), std::string::npos) << u.note;
  ASSERT_NE(row(u, "matmul", "8x8 T=1"), nullptr);
  EXPECT_DOUBLE_EQ(row(u, "attention", "H=2")->bytes, 300);
  const auto* c = by_kernel(u, "C");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op, "(unmatched)");
  // A labelled kernel outside every op call is "(no op)", named by its kernel.
  auto v = ops::build_kernel_timeline({{{"G", 0, 5, -1}, {"Z", 6, 9, -1}}}, {{"G", 0, 5, 0}, {"Z", 6, 9, -1}}, calls);
  ASSERT_TRUE(v.labelled);
  const auto* z = by_kernel(v, "Z");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->op, "(no op)");
  EXPECT_EQ(ops::build_kernel_timeline({}, {}, {}).rounds, 0);
}

}  // namespace
}  // namespace vi
