// `loom collective CONFIG`: one NCCL collective on the config's cluster, predicted in
// closed form for each algorithm NCCL has (ring, tree, hierarchical; core/
// collective_algorithms.hpp) with NCCL's choice, as nccl-tests reports it: time, algbw and
// busbw per size, so the network model can be held against published nccl-tests figures
// (docs/fabrics.md#collectives-loom-collective).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/collective_algorithms.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/units.hpp"

namespace loom {
namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::string op = "all-reduce";
  std::string size = "1GiB";
  int nodes = 0;          ///< 0: every node of the cluster (with the stride)
  int gpus_per_node = 0;  ///< 0: the cluster's
  int node_stride = 1;
  bool json = false;
};

double size_of(const std::string& text) {
  const auto v = parse_bytes(text);
  if (!v || *v <= 0)
    throw InputError("--size: '" + text + "' is not a size like 1GiB or 1MiB:8GiB (doubling)");
  return *v;
}

/// "1GiB" or "FROM:TO", doubling from FROM up to TO as nccl-tests' -b FROM -e TO -f 2.
std::vector<double> sizes(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {size_of(text)};
  const double from = size_of(text.substr(0, colon)), to = size_of(text.substr(colon + 1));
  if (to < from) throw InputError("--size: " + text + " ends below where it starts");
  std::vector<double> out;
  for (double s = from; s <= to * (1 + 1e-12); s *= 2) out.push_back(s);
  return out;
}

/// The collective's GPUs: the first `per_node` of every `stride`-th node.
struct Group {
  std::vector<int> gpus;
  int nodes = 0, per_node = 0;
};

Group group_of(const Cluster& c, const Options& o) {
  const int per_node = o.gpus_per_node > 0 ? o.gpus_per_node : c.gpus_per_node;
  if (per_node > c.gpus_per_node) {
    throw InputError("--gpus-per-node: " + std::to_string(per_node) + " is more than the " +
                     std::to_string(c.gpus_per_node) + " GPUs of a node (cluster.gpus_per_node)");
  }
  if (o.node_stride < 1) throw InputError("--node-stride: must be at least 1");
  if (o.nodes < 0 || o.gpus_per_node < 0)
    throw InputError(std::string(o.nodes < 0 ? "--nodes" : "--gpus-per-node") +
                     ": must be at least 1 (or 0 for all)");
  const int nodes = o.nodes > 0 ? o.nodes : (c.nodes + o.node_stride - 1) / o.node_stride;
  if (static_cast<long>(nodes - 1) * o.node_stride >= c.nodes) {
    throw InputError("--nodes: " + std::to_string(nodes) + " nodes " +
                     (o.node_stride > 1 ? "every " + std::to_string(o.node_stride) + " " : "") +
                     "do not fit the cluster's " + std::to_string(c.nodes) +
                     " (cluster.nodes, or --set cluster.nodes=N)");
  }
  Group g{{}, nodes, per_node};
  for (int k = 0; k < nodes; ++k)
    for (int j = 0; j < per_node; ++j) g.gpus.push_back(k * o.node_stride * c.gpus_per_node + j);
  return g;
}

CollectiveKind op_of(const std::string& op) {
  if (op == "all-reduce") return CollectiveKind::kAllReduce;
  if (op == "all-gather") return CollectiveKind::kAllGather;
  return CollectiveKind::kReduceScatter;
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", bytes, units[u]);
  return buf;
}

int run(const Options& o) {
  const Config config = load_config(o.config, o.overrides);
  const Cluster& c = config.cluster;
  const Group group = group_of(c, o);
  const std::vector<int>& gpus = group.gpus;
  const int nodes = group.nodes, per_node = group.per_node;
  const CollectiveKind op = op_of(o.op);
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json) {
    std::printf("%s over %zu GPUs (%d nodes x %d, every %d node%s; %s fabric), %s\n", o.op.c_str(),
                gpus.size(), nodes, per_node, o.node_stride, o.node_stride > 1 ? "s" : "",
                to_string(c.fabric.kind), "NCCL's choice: the fastest predicted");
    std::printf("%10s  %-12s %12s %11s %11s %12s %12s %12s  %s\n", "size", "choice", "time us",
                "algbw GB/s", "busbw GB/s", "ring us", "tree us", "hier. us", "bottleneck");
  }
  for (const double bytes : sizes(o.size)) {
    const std::vector<CollectivePrediction> all = predict_collective(c, op, bytes, gpus);
    const CollectivePrediction& best = nccl_choice(all);
    nlohmann::json algorithms = nlohmann::json::array();
    char times[3][16];
    for (size_t i = 0; i < all.size(); ++i) {
      const CollectivePrediction& p = all[i];
      std::snprintf(times[i], sizeof times[i], "%s", p.applies ? "" : "-");
      if (p.applies) std::snprintf(times[i], sizeof times[i], "%.1f", p.time_s * 1e6);
      nlohmann::json a = {{"algorithm", to_string(p.algorithm)}, {"applies", p.applies}};
      if (p.applies) {
        a.update({{"time_s", p.time_s},
                  {"algbw_bytes_per_s", p.algbw},
                  {"busbw_bytes_per_s", p.busbw},
                  {"bottleneck", p.bottleneck}});
      } else {
        a["why_not"] = p.why_not;
      }
      algorithms.push_back(a);
    }
    rows.push_back({{"bytes", bytes},
                    {"choice", to_string(best.algorithm)},
                    {"time_s", best.time_s},
                    {"algbw_bytes_per_s", best.algbw},
                    {"busbw_bytes_per_s", best.busbw},
                    {"algorithms", algorithms}});
    if (!o.json) {
      std::printf("%10s  %-12s %12.1f %11.2f %11.2f %12s %12s %12s  %s\n", human(bytes).c_str(),
                  to_string(best.algorithm), best.time_s * 1e6, best.algbw / 1e9, best.busbw / 1e9,
                  times[0], times[1], times[2], best.bottleneck.c_str());
    }
  }
  if (o.json) {
    std::cout << nlohmann::json{{"op", o.op},
                                {"gpus", gpus.size()},
                                {"nodes", nodes},
                                {"gpus_per_node", per_node},
                                {"node_stride", o.node_stride},
                                {"fabric", to_string(c.fabric.kind)},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
  }
  return 0;
}

}  // namespace

CommandRun attach_collective(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("CONFIG", o->config, "TOML config file (its [cluster] is used)")->required();
  sub.add_option("--set", o->overrides, "Override a key: section.key=value (repeatable)");
  sub.add_option("--op", o->op, "all-reduce (default), all-gather or reduce-scatter")
      ->check(CLI::IsMember({"all-reduce", "all-gather", "reduce-scatter"}));
  sub.add_option("--size", o->size,
                 "nccl-tests' size: an all-reduce's buffer, an all-gather's output, a "
                 "reduce-scatter's input; 1GiB, or FROM:TO doubling (as -b FROM -e TO -f 2)");
  sub.add_option("--nodes", o->nodes, "Nodes in the group (default: all, with the stride)");
  sub.add_option("--gpus-per-node", o->gpus_per_node,
                 "GPUs of each node in the group, its first ones (default: all)");
  sub.add_option("--node-stride", o->node_stride,
                 "Take every S-th node (default 1: consecutive), to spread a group over leaves");
  sub.add_flag("--json", o->json, "Print the predictions as JSON");
  return [o]() { return run(*o); };
}

}  // namespace loom
