// The [replay] section: the spot-trace replay (docs/replay.md) and the options of its
// policies (oobleck, varuna-like, bamboo-like, checkpoint-restart), read here rather than
// with the sections every study has.
#include <string>
#include <utility>
#include <vector>

#include "core/config_reader.hpp"

namespace loom::config {

ReplayConfig read_replay(Reader& r, const toml::table& root) {
  static const toml::table kEmpty;
  const toml::table* found = r.section(root, "", "replay");
  const toml::table& t = found ? *found : kEmpty;
  const std::string p = "replay.";
  ReplayConfig c;
  c.fault_tolerance = r.integer(t, p, "fault_tolerance", c.fault_tolerance, 0);
  c.global_batch = r.integer(t, p, "global_batch", c.global_batch, 0);
  c.min_pipeline_nodes = r.integer(t, p, "min_pipeline_nodes", c.min_pipeline_nodes, 0);
  c.throughput_table = relative_to_config(r.file(), r.string(t, p, "throughput_table", ""));
  c.throughput_model = r.string(t, p, "throughput_model", "");
  c.bamboo_throughput_table =
      relative_to_config(r.file(), r.string(t, p, "bamboo_throughput_table", ""));
  c.varuna_throughput_table =
      relative_to_config(r.file(), r.string(t, p, "varuna_throughput_table", ""));
  c.reconfiguration_s =
      r.quantity(t, p, "reconfiguration", c.reconfiguration_s, parse_seconds, "2s", false);
  c.checkpoint_interval = r.integer(t, p, "checkpoint_interval", c.checkpoint_interval, 1);
  c.checkpoint_save_s =
      r.quantity(t, p, "checkpoint_save", c.checkpoint_save_s, parse_seconds, "11.2s", false);
  c.restart_s = r.quantity(t, p, "restart", c.restart_s, parse_seconds, "78.7s", false);
  c.baseline_pp = r.integer(t, p, "baseline_pp", c.baseline_pp, 0);
  // Bamboo's redundant computation and failover are simulated through the `bamboo`
  // schedule now; the factors that stood in for them are gone.
  for (const char* old : {"bamboo_redundancy", "bamboo_failover_slowdown", "bamboo_memory_factor"})
    if (const toml::node* n = t.get(old))
      r.fail(n, p + old,
             "removed: bamboo-like simulates its redundant computation, memory and failover "
             "through the `bamboo` schedule (docs/replay.md); delete the key");
  c.scheduler = r.string(t, p, "scheduler", c.scheduler);
  c.bamboo_microbatch_size = r.integer(t, p, "bamboo_microbatch_size", c.bamboo_microbatch_size, 0);
  c.bamboo_failover_s =
      r.quantity(t, p, "bamboo_failover", c.bamboo_failover_s, parse_seconds, "20s", false);
  c.bamboo_reconfigure_s =
      r.quantity(t, p, "bamboo_reconfigure", c.bamboo_reconfigure_s, parse_seconds, "30s", false);
  c.bamboo_join_delay_s =
      r.quantity(t, p, "bamboo_join_delay", c.bamboo_join_delay_s, parse_seconds, "45s", false);
  c.bamboo_activation_factor =
      r.number(t, p, "bamboo_activation_factor", c.bamboo_activation_factor, true);
  if (c.bamboo_activation_factor != 1 && c.bamboo_activation_factor != 2)
    r.fail(t.get("bamboo_activation_factor"), p + "bamboo_activation_factor",
           "must be 1 or 2 (2: bf16/fp16 activations counted as fp32)");
  c.notice_s = r.quantity(t, p, "notice", c.notice_s, parse_seconds, "120s", false);
  c.join = r.string(t, p, "join", c.join, {"next-reconfiguration", "immediate"});
  c.concurrent_removals = r.string(t, p, "concurrent_removals", c.concurrent_removals,
                                   {"one-reconfiguration", "stall"});
  c.node_ready_s = r.quantity(t, p, "node_ready", c.node_ready_s, parse_seconds, "45s", false);
  return c;
}

std::vector<std::pair<std::string, std::string>> replay_files(const ReplayConfig& c) {
  return {{"throughput_table", c.throughput_table},
          {"bamboo_throughput_table", c.bamboo_throughput_table},
          {"varuna_throughput_table", c.varuna_throughput_table}};
}

}  // namespace loom::config
