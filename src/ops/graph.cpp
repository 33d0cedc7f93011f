#include "ops/graph.h"

#include <array>

namespace vi::ops {

GraphFns& graph_fns(Device d) {
  static std::array<GraphFns, kNumDevices> fns;
  return fns[static_cast<size_t>(d)];
}

bool graphs_supported(const Context& ctx) { return graph_fns(ctx.device).record != nullptr; }

std::unique_ptr<Graph> record(Context& ctx, const std::function<void(Context&)>& body) {
  VI_CHECK(graphs_supported(ctx), "recording device work is not supported on {}", device_name(ctx.device));
  return graph_fns(ctx.device).record(ctx, body);
}

}  // namespace vi::ops
