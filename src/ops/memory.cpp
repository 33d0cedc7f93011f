#include "ops/memory.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "ops/profiler.h"

namespace vi::ops {

MemoryFns& memory_fns(Device d) {
  static std::array<MemoryFns, kNumDevices> fns;
  return fns[static_cast<size_t>(d)];
}

namespace {
const MemoryFns& need(Device d, bool ok, const char* what) {
  const MemoryFns& f = memory_fns(d);
  VI_CHECK(ok, "no {} backend is built into this binary (needed for {})", device_name(d), what);
  return f;
}
}  // namespace

Tensor empty(Context& ctx, DType dtype, const std::vector<int64_t>& shape) {
  const MemoryFns& f = need(ctx.device, memory_fns(ctx.device).empty != nullptr, "allocation");
  return f.empty(ctx, dtype, shape);
}

Tensor upload(Context& ctx, const Tensor& host) {
  VI_CHECK(host.device() == Device::CPU, "upload needs a host tensor");
  if (ctx.device == Device::CPU) return host;
  const MemoryFns& f = need(ctx.device, memory_fns(ctx.device).upload != nullptr, "upload");
  return f.upload(ctx, host);
}

void upload_into(Context& ctx, const void* host, size_t bytes, Tensor& dst) {
  VI_CHECK(dst.device() == ctx.device && bytes <= dst.nbytes(), "upload_into: {} bytes do not fit {} on {}", bytes,
           dst.shape_str(), device_name(dst.device()));
  if (bytes == 0) return;
  if (ctx.device == Device::CPU) {
    std::memcpy(dst.data(), host, bytes);
    return;
  }
  const MemoryFns& f = need(ctx.device, memory_fns(ctx.device).upload_into != nullptr, "upload");
  f.upload_into(ctx, host, bytes, dst);
}

void zero(Context& ctx, Tensor& t) {
  VI_CHECK(t.device() == ctx.device, "zero: a {} tensor on {} with a {} context", t.shape_str(), device_name(t.device()),
           device_name(ctx.device));
  if (t.nbytes() == 0) return;
  if (ctx.device == Device::CPU) {
    std::memset(t.data(), 0, t.nbytes());
    return;
  }
  const MemoryFns& f = need(ctx.device, memory_fns(ctx.device).zero != nullptr, "zero");
  f.zero(ctx, t);
}

namespace {
// -1: the device's default (half its last-level cache); 0: off; else MiB (VI_L2_PREFETCH).
int64_t prefetch_env_mib() {
  static const int64_t v = [] {
    const char* e = std::getenv("VI_L2_PREFETCH");
    if (!e || !*e) return int64_t{-1};
    char* end = nullptr;
    const long long mib = std::strtoll(e, &end, 10);
    VI_CHECK(end && *end == '\0' && mib >= 0, "VI_L2_PREFETCH must be a whole number of MiB (0: off), not '{}'", e);
    return static_cast<int64_t>(mib);
  }();
  return v;
}
}  // namespace

int64_t prefetch_budget(Context& ctx) {
  if (ctx.device == Device::CPU) return 0;
  const MemoryFns& f = memory_fns(ctx.device);
  if (f.prefetch == nullptr || f.cache_bytes == nullptr) return 0;
  const int64_t mib = prefetch_env_mib();
  return mib >= 0 ? mib << 20 : f.cache_bytes(ctx) / 2;
}

void prefetch(Context& ctx, const Tensor& t, int64_t begin, int64_t end) {
  VI_CHECK(t.device() == ctx.device, "prefetch: a {} tensor on {} with a {} context", t.shape_str(),
           device_name(t.device()), device_name(ctx.device));
  VI_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(t.nbytes()),
           "prefetch: bytes [{}, {}) are not inside {} ({} bytes)", begin, end, t.shape_str(), t.nbytes());
  if (begin == end || prefetch_budget(ctx) == 0) return;
  // No bytes in the profile: the kernel that reads them counts them.
  VI_OP_SCOPE(ctx, "prefetch", t.dtype(), 0, "{} bytes", end - begin);
  memory_fns(ctx.device).prefetch(ctx, t, begin, end);
}

Tensor download(Context& ctx, const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  const MemoryFns& f = need(t.device(), memory_fns(t.device()).download != nullptr, "download");
  VI_OP_SCOPE(ctx, "download", t.dtype(), t.nbytes(), "{}x{}", t.rows(), t.cols());
  return f.download(ctx, t);
}

void synchronize(Context& ctx) {
  const MemoryFns& f = memory_fns(ctx.device);
  if (f.synchronize) f.synchronize(ctx);
}

}  // namespace vi::ops
