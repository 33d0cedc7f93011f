#include "ops/kernel_timeline.h"

#include <algorithm>
#include <map>

#include "core/dtype.h"

namespace vi::ops {

namespace {

void by_start(std::vector<KernelSpan>& v) {
  std::stable_sort(v.begin(), v.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
}

bool same_names(const std::vector<KernelSpan>& a, const std::vector<KernelSpan>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name) return false;
  return true;
}

std::string class_key(const std::string& op, const std::string& dtype, const std::string& shape) {
  return op + '\x1f' + dtype + '\x1f' + shape;
}

}  // namespace

std::string short_kernel_name(const std::string& d) {
  // The parameter list: the first '(' outside template arguments, not "(anonymous namespace)".
  int angle = 0;
  size_t end = d.size();
  for (size_t i = 0; i < d.size(); ++i) {
    const char ch = d[i];
    if (ch == '<') ++angle;
    else if (ch == '>') angle = std::max(0, angle - 1);
    else if (ch == '(' && angle == 0 && d.compare(i, 21, "(anonymous namespace)") != 0) {
      end = i;
      break;
    }
  }
  std::string s = d.substr(0, end);
  // The qualified name starts after the last space outside template arguments (return type).
  angle = 0;
  size_t begin = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++angle;
    else if (s[i] == '>') angle = std::max(0, angle - 1);
    else if (s[i] == ' ' && angle == 0 && s.compare(i + 1, 10, "namespace)") != 0) begin = i + 1;
  }
  s = s.substr(begin);
  // Drop the scope: everything up to the last "::" outside template arguments.
  angle = 0;
  size_t scope = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '<') ++angle;
    else if (s[i] == '>') angle = std::max(0, angle - 1);
    else if (angle == 0 && s[i] == ':' && s[i + 1] == ':') scope = i + 2;
  }
  return s.substr(scope);
}

namespace {

// For each kernel of r: the call of the labelled kernel it is paired with, by position when the
// names agree throughout, else along a longest common subsequence of the names; -2 unpaired.
std::vector<int64_t> match_calls(const std::vector<KernelSpan>& r, const std::vector<KernelSpan>& lab) {
  std::vector<int64_t> out(r.size(), -2);
  if (same_names(r, lab)) {
    for (size_t i = 0; i < r.size(); ++i) out[i] = lab[i].call;
    return out;
  }
  const size_t n = r.size(), m = lab.size();
  std::vector<uint32_t> len((n + 1) * (m + 1), 0);  // len[i][j]: LCS of r[i..] and lab[j..]
  auto at = [&](size_t i, size_t j) -> uint32_t& { return len[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      at(i, j) = r[i].name == lab[j].name ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
  for (size_t i = 0, j = 0; i < n && j < m;) {
    if (r[i].name == lab[j].name) {
      out[i++] = lab[j++].call;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

}  // namespace

KernelTimeline build_kernel_timeline(std::vector<std::vector<KernelSpan>> rounds, std::vector<KernelSpan> labelled,
                                     const std::vector<OpCall>& calls) {
  KernelTimeline t;
  rounds.erase(std::remove_if(rounds.begin(), rounds.end(), [](const auto& r) { return r.empty(); }), rounds.end());
  if (rounds.empty()) {
    t.note = "no kernels traced";
    return t;
  }
  for (auto& r : rounds) by_start(r);
  by_start(labelled);

  // Labels carry over by position where a round replays the labelled round's kernels, else along
  // a longest common subsequence of kernel names (a recorded step may size a launch differently:
  // e.g. attention splits for a key bound rounded up to a power of two).
  std::vector<std::vector<int64_t>> call_of;  // per round and kernel: call, -1 no op, -2 unmatched
  size_t unmatched = 0, total = 0;
  for (const auto& r : rounds) {
    call_of.push_back(match_calls(r, labelled));
    for (int64_t c : call_of.back()) unmatched += c == -2;
    total += r.size();
  }
  t.labelled = !labelled.empty() && unmatched < total;
  if (labelled.empty()) t.note = "no labelled round: rows are kernel names";
  else if (!t.labelled) t.note = "no kernel matched the op-by-op round's: rows are kernel names";
  else if (unmatched > 0)
    t.note = fmt::format("{:.1f} of {:.1f} kernels per round matched none of the op-by-op round's (rows \"(unmatched)\")",
                         static_cast<double>(unmatched) / rounds.size(), static_cast<double>(total) / rounds.size());

  struct Acc {
    KernelTimeline::Row row;
    std::vector<std::string> names;
    std::vector<int64_t> calls_seen;  // labelled: the distinct calls of this class, for bytes
  };
  std::map<std::string, Acc> acc;
  std::vector<std::string> order;  // keys in first-launch order (ties in the sort keep it)
  auto row_of = [&](int64_t matched, const KernelSpan& k) -> Acc& {
    std::string op = "(kernel)", dtype, shape;
    int64_t call = -1;
    if (t.labelled) {
      call = matched;
      if (call >= 0 && static_cast<size_t>(call) < calls.size()) {
        const OpCall& c = calls[static_cast<size_t>(call)];
        op = c.op, dtype = dtype_name(c.dtype), shape = c.shape;
      } else {
        op = call == -2 ? "(unmatched)" : "(no op)";
        call = -1;
      }
    }
    const std::string key = call >= 0 ? class_key(op, dtype, shape) : class_key(op, "", k.name);
    auto [it, fresh] = acc.try_emplace(key);
    Acc& a = it->second;
    if (fresh) {
      a.row.op = op, a.row.dtype = dtype, a.row.shape = call >= 0 ? shape : "";
      order.push_back(key);
    }
    if (std::find(a.names.begin(), a.names.end(), k.name) == a.names.end()) {
      a.names.push_back(k.name);
      a.row.kernel_us.push_back(0.0);
    }
    if (call >= 0 && std::find(a.calls_seen.begin(), a.calls_seen.end(), call) == a.calls_seen.end()) {
      a.calls_seen.push_back(call);
      a.row.bytes += calls[static_cast<size_t>(call)].bytes;  // one round's worth
    }
    return a;
  };

  const double n = static_cast<double>(rounds.size());
  for (size_t ri = 0; ri < rounds.size(); ++ri) {
    const auto& r = rounds[ri];
    uint64_t frontier = r.front().start_ns;  // latest end so far
    uint64_t busy = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const KernelSpan& k = r[i];
      const uint64_t end = std::max(k.end_ns, k.start_ns);
      const uint64_t charged = end > frontier ? end - frontier : 0;
      const uint64_t gap = k.start_ns > frontier ? k.start_ns - frontier : 0;
      busy += charged - std::min(charged, gap);
      Acc& a = row_of(call_of[ri][i], k);
      a.row.launches += 1 / n;
      a.row.us += charged / 1e3 / n;
      a.row.kernel_us[std::find(a.names.begin(), a.names.end(), k.name) - a.names.begin()] += charged / 1e3 / n;
      a.row.gap_us += gap / 1e3 / n;
      a.row.own_us += (end - k.start_ns) / 1e3 / n;
      frontier = std::max(frontier, end);
    }
    t.span_us += (frontier - r.front().start_ns) / 1e3 / n;
    t.busy_us += busy / 1e3 / n;
    t.kernels += static_cast<double>(r.size()) / n;
  }
  t.rounds = static_cast<int>(rounds.size());
  for (const std::string& key : order) {
    Acc& a = acc[key];
    for (size_t i = 0; i < a.names.size(); ++i) a.row.kernels += (i ? " + " : "") + a.names[i];
    a.row.kernel_names = a.names;
    t.rows.push_back(a.row);
  }
  std::stable_sort(t.rows.begin(), t.rows.end(),
                   [](const KernelTimeline::Row& a, const KernelTimeline::Row& b) { return a.us > b.us; });
  return t;
}

std::string kernel_timeline_markdown(const KernelTimeline& t) {
  if (t.rounds == 0) return "(no kernels traced: " + t.note + ")\n";
  std::string out =
      "| op | dtype | shape | kernels | launches | µs/round | of which gap | MB/round | GB/s | share of round |\n"
      "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  double bytes = 0, gap = 0;
  for (const auto& r : t.rows) {
    bytes += r.bytes;
    gap += r.gap_us;
    std::string kernels = r.kernels;
    if (r.kernel_names.size() > 1 && r.kernel_us.size() == r.kernel_names.size()) {  // where the time went
      kernels.clear();
      for (size_t i = 0; i < r.kernel_names.size(); ++i)
        kernels += fmt::format("{}{} ({:.1f} µs)", i ? " + " : "", r.kernel_names[i], r.kernel_us[i]);
    }
    out += fmt::format("| {} | {} | {} | {} | {:.0f} | {:.1f} | {:.1f} | {} | {} | {:.1f}% |\n", r.op, r.dtype, r.shape,
                       kernels, r.launches, r.us, r.gap_us, r.bytes > 0 ? fmt::format("{:.2f}", r.bytes / 1e6) : "",
                       r.bytes > 0 && r.us > 0 ? fmt::format("{:.0f}", r.bytes / r.us / 1e3) : "",
                       t.span_us > 0 ? 100.0 * r.us / t.span_us : 0.0);
  }
  out += fmt::format(
      "| **round** | | | | {:.0f} | {:.1f} | {:.1f} | {} | {} | 100% |\n", t.kernels, t.span_us, gap,
      bytes > 0 ? fmt::format("{:.2f}", bytes / 1e6) : "", bytes > 0 ? fmt::format("{:.0f}", bytes / t.span_us / 1e3) : "");
  out += fmt::format(
      "\n{} traced rounds; device span {:.1f} µs per round (first kernel start to last kernel end), of which {:.1f} µs "
      "with a kernel running and {:.1f} µs with none. Each kernel is charged from the latest end before it to its own "
      "end.{}\n",
      t.rounds, t.span_us, t.busy_us, t.span_us - t.busy_us, t.note.empty() ? "" : " " + t.note + ".");
  return out;
}

}  // namespace vi::ops
