// Oobleck's per-layer profile (dissertation §2.4.1.2: F_{l,d}, B_{l,d}, memory per layer),
// built from a Loom model + cost model or read from a measured CSV.
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/memory_model.hpp"
#include "core/units.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

/// Two-member ring all-reduce of `bytes` on one link: 2 steps of bytes/2 each.
double two_member_ring_s(double bytes, const LinkSpec& link) {
  if (bytes <= 0) return 0;
  return bytes / link.bandwidth + 2 * link.latency;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) {
    while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\r')) cell.pop_back();
    size_t start = cell.find_first_not_of(' ');
    out.push_back(start == std::string::npos ? "" : cell.substr(start));
  }
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

double parse_number(const std::string& text, const std::string& where, const std::string& column) {
  const std::optional<double> v = loom::parse_number(text);
  if (!v || *v < 0) {
    throw InputError(where + ": column '" + column + "': expected a non-negative number, got '" +
                     text + "'");
  }
  return *v;
}

}  // namespace

LayerProfile profile_from_model(const Model& model, const CostModel& cost,
                                const std::vector<const Sample*>& microbatch,
                                const Cluster& cluster, const MemoryConstants& memory) {
  LayerProfile out;
  for (int l = 0; l < model.num_layers(); ++l) {
    const MicrobatchShape shape = layer_shape(model, l, microbatch);
    const PassCost pc = effective_cost(cost, model, l, shape, 1);
    LayerCost c;
    c.forward_s = pc.forward_s;
    c.backward_s = pc.backward_s();
    // Oobleck's pipelines each hold whole model states: templates are sized without
    // optimizer sharding, whatever parallel.distributed_optimizer says (Oobleck shards
    // nothing across its heterogeneous pipelines).
    const StaticMemory state = layer_state_bytes(cost, model, l, 1, memory, 1);
    const double weights = state.parameters;
    const double optimizer = state.optimizer;
    const double gradients = state.gradients;
    const double activations = c.backward_s > 0 ? cost.activation_bytes(l, shape, 1) : 0;
    c.memory_bytes = weights + optimizer + gradients + activations;
    c.state_bytes = weights + optimizer;
    c.allreduce_in_node_s = two_member_ring_s(gradients, cluster.intra_node);
    c.allreduce_across_nodes_s = two_member_ring_s(gradients, cluster.inter_node);
    out.push_back(c);
  }
  return out;
}

LayerProfile load_profile_csv(const std::string& path) {
  std::ifstream in = open_for_read(path, "layer profile");
  std::string line;
  if (!std::getline(in, line)) throw InputError(path + ":1: empty file, expected a header");
  const std::vector<std::string> header = split_csv(line);
  std::map<std::string, size_t> col;
  static const char* kKnown[] = {"layer",
                                 "forward_s",
                                 "backward_s",
                                 "memory_bytes",
                                 "state_bytes",
                                 "allreduce_in_node_s",
                                 "allreduce_across_nodes_s"};
  for (size_t i = 0; i < header.size(); ++i) {
    bool known = false;
    for (const char* k : kKnown) known = known || header[i] == k;
    if (!known) {
      throw InputError(path + ":1: unknown column '" + header[i] +
                       "' (expected layer,forward_s,backward_s,memory_bytes and optionally "
                       "state_bytes,allreduce_in_node_s,allreduce_across_nodes_s)");
    }
    if (!col.emplace(header[i], i).second)
      throw InputError(path + ":1: column '" + header[i] + "' appears twice");
  }
  for (const char* k : {"layer", "forward_s", "backward_s", "memory_bytes"}) {
    if (!col.count(k)) throw InputError(path + ":1: missing column '" + std::string(k) + "'");
  }
  LayerProfile out;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty() || line == "\r") continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const std::vector<std::string> cells = split_csv(line);
    if (cells.size() != header.size()) {
      throw InputError(where + ": expected " + std::to_string(header.size()) + " fields, got " +
                       std::to_string(cells.size()));
    }
    auto get = [&](const char* name, double fallback) {
      auto it = col.find(name);
      return it == col.end() ? fallback : parse_number(cells[it->second], where, name);
    };
    const double layer = get("layer", 0);
    if (layer != static_cast<double>(out.size())) {
      throw InputError(where + ": column 'layer': expected layer " + std::to_string(out.size()) +
                       " (layers are numbered 0, 1, ... in order), got '" + cells[col.at("layer")] +
                       "'");
    }
    LayerCost c;
    c.forward_s = get("forward_s", 0);
    c.backward_s = get("backward_s", 0);
    c.memory_bytes = get("memory_bytes", 0);
    c.state_bytes = get("state_bytes", c.memory_bytes);
    c.allreduce_in_node_s = get("allreduce_in_node_s", 0);
    c.allreduce_across_nodes_s = get("allreduce_across_nodes_s", 0);
    out.push_back(c);
  }
  if (out.empty()) throw InputError(path + ":2: no layers in the profile");
  return out;
}

}  // namespace loom::oobleck
