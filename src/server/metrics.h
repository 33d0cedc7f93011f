// /metrics in the Prometheus text exposition format: the engine's counters, gauges and
// latency histograms plus the server's own counters (HTTP responses, disconnects).
#pragma once

#include <string>

#include "server/server_context.h"

namespace vi::server {

std::string render_metrics(ServerContext& ctx);

}  // namespace vi::server
