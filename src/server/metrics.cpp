// Prometheus text rendering (see metrics.h). Names follow Prometheus conventions:
// counters end in _total, durations are in seconds, histogram buckets are cumulative.
#include "server/metrics.h"

#include <fmt/format.h>

#include <iterator>

namespace vi::server {

namespace {
void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void histogram(std::string& out, const char* name, const char* help, const double* bounds, size_t n_bounds,
               const std::vector<uint64_t>& counts, double sum, uint64_t n) {
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < n_bounds; ++i) {
    cum += i < counts.size() ? counts[i] : 0;
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, n);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum, name, n);
}
}  // namespace

std::string render_metrics(ServerContext& ctx) {
  EngineStats s = ctx.engine.stats();
  std::string out;
  header(out, "voltinfer_requests_total", "counter", "Generation requests the engine ended, by outcome");
  out += fmt::format("voltinfer_requests_total{{outcome=\"finished\"}} {}\n", s.requests_finished);
  out += fmt::format("voltinfer_requests_total{{outcome=\"cancelled\"}} {}\n", s.requests_cancelled);
  out += fmt::format("voltinfer_requests_total{{outcome=\"failed\"}} {}\n", s.requests_failed);
  header(out, "voltinfer_client_disconnects_total", "counter",
         "Requests whose client hung up before the answer was complete (their sequence was cancelled)");
  out += fmt::format("voltinfer_client_disconnects_total {}\n", ctx.counters.client_disconnects.load());
  header(out, "voltinfer_stop_string_matches_total", "counter", "Generations ended by a stop string");
  out += fmt::format("voltinfer_stop_string_matches_total {}\n", ctx.counters.stop_string_matches.load());
  header(out, "voltinfer_prompt_tokens_total", "counter", "Prompt tokens processed");
  out += fmt::format("voltinfer_prompt_tokens_total {}\n", s.prompt_tokens);
  header(out, "voltinfer_generated_tokens_total", "counter", "Tokens generated");
  out += fmt::format("voltinfer_generated_tokens_total {}\n", s.generated_tokens);
  header(out, "voltinfer_draft_tokens_total", "counter",
         "Speculative decoding (--spec): draft tokens proposed, and of them those kept");
  out += fmt::format("voltinfer_draft_tokens_total{{outcome=\"proposed\"}} {}\n", s.spec.drafted);
  out += fmt::format("voltinfer_draft_tokens_total{{outcome=\"kept\"}} {}\n", s.spec.accepted);
  header(out, "voltinfer_engine_steps_total", "counter", "Batched forward passes run");
  out += fmt::format("voltinfer_engine_steps_total {}\n", s.steps);
  header(out, "voltinfer_queue_depth", "gauge", "Requests waiting for a sequence slot");
  out += fmt::format("voltinfer_queue_depth {}\n", s.queue_depth);
  header(out, "voltinfer_max_queue", "gauge", "Requests that may wait for a slot (--max-queue); more get HTTP 503");
  out += fmt::format("voltinfer_max_queue {}\n", ctx.engine.options().max_queue);
  header(out, "voltinfer_running_sequences", "gauge", "Sequences being prefilled or decoded");
  out += fmt::format("voltinfer_running_sequences {}\n", s.running);
  header(out, "voltinfer_max_sequences", "gauge", "Sequence slots (-np/--parallel)");
  out += fmt::format("voltinfer_max_sequences {}\n", ctx.engine.options().max_seqs);
  histogram(out, "voltinfer_time_to_first_token_seconds",
            "Time from the request's arrival to its first generated token (queue time included)",
            EngineStats::kTtftBuckets, std::size(EngineStats::kTtftBuckets), s.ttft_counts, s.ttft_sum, s.ttft_n);
  histogram(out, "voltinfer_queue_time_seconds", "Time a request waited for a sequence slot (arrival to admission)",
            EngineStats::kQueueBuckets, std::size(EngineStats::kQueueBuckets), s.queue_counts, s.queue_sum,
            s.queue_n);
  histogram(out, "voltinfer_time_per_output_token_seconds", "Time between consecutive generated tokens",
            EngineStats::kTpotBuckets, std::size(EngineStats::kTpotBuckets), s.tpot_counts, s.tpot_sum, s.tpot_n);
  // Prefix cache: hit rates and pool sizes (blocks of KV, snapshots of recurrent state).
  const KvCacheStats& c = s.cache;
  header(out, "voltinfer_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache");
  out += fmt::format("voltinfer_prompt_tokens_cached_total {}\n", c.reused_tokens);
  header(out, "voltinfer_prefix_cache_token_hit_rate", "gauge", "Reused / all prompt tokens since start");
  out += fmt::format("voltinfer_prefix_cache_token_hit_rate {}\n",
                     c.prompt_tokens ? static_cast<double>(c.reused_tokens) / static_cast<double>(c.prompt_tokens) : 0.0);
  header(out, "voltinfer_prefix_cache_request_hit_rate", "gauge", "Requests that reused cached tokens / all");
  out += fmt::format("voltinfer_prefix_cache_request_hit_rate {}\n",
                     c.lookups ? static_cast<double>(c.hits) / static_cast<double>(c.lookups) : 0.0);
  header(out, "voltinfer_kv_blocks", "gauge", "KV blocks by tier and state");
  out += fmt::format("voltinfer_kv_blocks{{tier=\"device\",state=\"capacity\"}} {}\n", c.device_blocks);
  out += fmt::format("voltinfer_kv_blocks{{tier=\"device\",state=\"used\"}} {}\n", c.device_blocks_used);
  out += fmt::format("voltinfer_kv_blocks{{tier=\"device\",state=\"cached\"}} {}\n", c.device_blocks_cached);
  out += fmt::format("voltinfer_kv_blocks{{tier=\"host\",state=\"capacity\"}} {}\n", c.host_blocks);
  out += fmt::format("voltinfer_kv_blocks{{tier=\"host\",state=\"used\"}} {}\n", c.host_blocks_used);
  header(out, "voltinfer_state_snapshots", "gauge", "Recurrent-state snapshots by tier and state");
  out += fmt::format("voltinfer_state_snapshots{{tier=\"device\",state=\"capacity\"}} {}\n", c.device_snapshots);
  out += fmt::format("voltinfer_state_snapshots{{tier=\"device\",state=\"used\"}} {}\n", c.device_snapshots_used);
  out += fmt::format("voltinfer_state_snapshots{{tier=\"host\",state=\"capacity\"}} {}\n", c.host_snapshots);
  out += fmt::format("voltinfer_state_snapshots{{tier=\"host\",state=\"used\"}} {}\n", c.host_snapshots_used);
  header(out, "voltinfer_cache_pool_bytes", "gauge", "Capacity of the cache pools in bytes");
  out += fmt::format("voltinfer_cache_pool_bytes{{tier=\"device\"}} {}\n", c.device_bytes);
  out += fmt::format("voltinfer_cache_pool_bytes{{tier=\"host\"}} {}\n", c.host_bytes);
  header(out, "voltinfer_cache_moves_total", "counter", "Blocks and snapshots moved between tiers");
  out += fmt::format("voltinfer_cache_moves_total{{what=\"block\",to=\"host\"}} {}\n", c.blocks_to_host);
  out += fmt::format("voltinfer_cache_moves_total{{what=\"block\",to=\"device\"}} {}\n", c.blocks_from_host);
  out += fmt::format("voltinfer_cache_moves_total{{what=\"snapshot\",to=\"host\"}} {}\n", c.snapshots_to_host);
  header(out, "voltinfer_http_responses_total", "counter", "HTTP responses by route and status");
  {
    std::lock_guard<std::mutex> lock(ctx.counters.mu);
    for (const auto& [key, n] : ctx.counters.http)
      out += fmt::format("voltinfer_http_responses_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  }
  return out;
}

}  // namespace vi::server
