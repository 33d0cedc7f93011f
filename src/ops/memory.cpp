#include "ops/memory.h"

#include <array>
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

void* new_stream(Context& ctx) {
  const MemoryFns& f = memory_fns(ctx.device);
  return f.new_stream ? f.new_stream(ctx) : nullptr;
}

void stream_wait(Context& waiter, Context& signaler) {
  VI_CHECK(waiter.device == signaler.device, "stream_wait: a {} queue cannot wait for a {} one", device_name(waiter.device),
           device_name(signaler.device));
  const MemoryFns& f = memory_fns(waiter.device);
  if (f.stream_wait && waiter.stream != signaler.stream) f.stream_wait(waiter, signaler);
}

}  // namespace vi::ops
