#include "core/routing.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/csv.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/io.hpp"
#include "core/model.hpp"

namespace loom {

std::string Routing::text() const {
  switch (kind) {
    case RoutingKind::kBalanced:
      return "balanced";
    case RoutingKind::kZipf: {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "zipf:%g", zipf_exponent);
      return buffer;
    }
    case RoutingKind::kTrace:
      return "trace:" + trace_path;
  }
  return "?";
}

namespace {

std::map<int, std::vector<double>> read_trace(const std::string& path, int experts, int layers) {
  std::map<int, std::vector<double>> loads;
  try {
    io::CSVReader<3, io::trim_chars<' ', '\t'>, io::no_quote_escape<','>, io::throw_on_overflow> in(
        path);
    in.read_header(io::ignore_no_column, "layer", "expert", "load");
    std::string layer_text, expert_text, load_text;
    while (in.read_row(layer_text, expert_text, load_text)) {
      const std::string where = path + ":" + std::to_string(in.get_file_line());
      int layer = -1, expert = -1;
      double load = -1;
      auto whole = [](const std::string& t, int& v) {
        const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        return ec == std::errc{} && p == t.data() + t.size();
      };
      char* end = nullptr;
      load = std::strtod(load_text.c_str(), &end);
      if (!whole(layer_text, layer) || !whole(expert_text, expert) || load_text.empty() ||
          *end != '\0' || !std::isfinite(load))
        throw InputError(where + ": layer and expert must be whole numbers and load a number");
      if (layer < 0 || layer >= layers)
        throw InputError(where + ": layer " + std::to_string(layer) +
                         " is not one of the module's " + std::to_string(layers) +
                         " layers (0-based)");
      if (expert < 0 || expert >= experts)
        throw InputError(where + ": expert " + std::to_string(expert) + " is not one of the " +
                         std::to_string(experts) + " experts (0-based)");
      if (load < 0) throw InputError(where + ": load must be >= 0");
      auto& row = loads[layer];
      row.resize(static_cast<size_t>(experts), 0.0);
      row[static_cast<size_t>(expert)] += load;
    }
  } catch (const io::error::base& e) {
    throw InputError(path + ": " + e.what() + " (expected a CSV with columns layer,expert,load)");
  }
  for (auto& [layer, row] : loads) {
    const double total = std::accumulate(row.begin(), row.end(), 0.0);
    if (total <= 0)
      throw InputError(path + ": layer " + std::to_string(layer) + " has no load on any expert");
    for (double& x : row) x /= total;
  }
  return loads;
}

}  // namespace

Routing parse_routing(const std::string& value, const std::string& key, int experts, int layers,
                      const std::string& base_dir) {
  Routing r;
  const std::string fix =
      ": use \"balanced\", \"zipf:S\" (S > 0, e.g. \"zipf:1.2\") or "
      "\"trace:FILE\" (a CSV layer,expert,load)";
  if (value == "balanced") return r;
  if (value.rfind("zipf:", 0) == 0) {
    const std::string s = value.substr(5);
    char* end = nullptr;
    r.zipf_exponent = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(r.zipf_exponent > 0) || !std::isfinite(r.zipf_exponent))
      throw InputError(key + ": '" + value + "' has no exponent > 0" + fix);
    r.kind = RoutingKind::kZipf;
    return r;
  }
  if (value.rfind("trace:", 0) == 0 && value.size() > 6) {
    r.kind = RoutingKind::kTrace;
    r.trace_path = value.substr(6);
    std::filesystem::path path(r.trace_path);
    if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
    check_readable_file(path.string(), key + " trace (relative to the config file)");
    r.trace_shares = read_trace(path.string(), experts, layers);
    return r;
  }
  throw InputError(key + ": unknown routing '" + value + "'" + fix);
}

double ExpertLoad::busiest_factor() const {
  if (rank_share.empty()) return 1;
  return *std::max_element(rank_share.begin(), rank_share.end()) * isize(rank_share);
}

ExpertLoad expert_load(const Routing& routing, const LayerSpec& layer, int local_layer,
                       int microbatch, int group, int ep) {
  const int experts = layer.experts;
  std::vector<double> share(static_cast<size_t>(experts), 1.0 / experts);
  if (routing.kind == RoutingKind::kZipf) {
    // One generator per (seed, layer, microbatch, group): draws do not depend on the order
    // the lowering asks in.
    std::seed_seq seq{routing.seed, static_cast<std::uint64_t>(local_layer),
                      static_cast<std::uint64_t>(microbatch), static_cast<std::uint64_t>(group)};
    std::mt19937_64 rng(seq);
    std::vector<int> rank(static_cast<size_t>(experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), rng);
    double total = 0;
    for (int e = 0; e < experts; ++e)
      total += share[static_cast<size_t>(e)] =
          std::pow(rank[static_cast<size_t>(e)], -routing.zipf_exponent);
    for (double& x : share) x /= total;
  } else if (routing.kind == RoutingKind::kTrace) {
    const auto it = routing.trace_shares.find(local_layer);
    if (it == routing.trace_shares.end())
      throw InputError("routing trace " + routing.trace_path + ": no loads for layer " +
                       std::to_string(local_layer) + " of the module");
    share = it->second;
  }
  ExpertLoad load;
  load.rank_share.assign(static_cast<size_t>(ep), 0.0);
  const double cap = layer.capacity_factor > 0 ? layer.capacity_factor / experts : 1.0;
  const int per_rank = experts / ep;
  for (int e = 0; e < experts; ++e) {
    const double kept = std::min(share[static_cast<size_t>(e)], cap);
    load.dropped += share[static_cast<size_t>(e)] - kept;
    load.rank_share[static_cast<size_t>(e / per_rank)] += kept;
  }
  return load;
}

RoutingSummary summarize_routing(const Model& model, int microbatches, int groups, int ep) {
  RoutingSummary sum;
  double busiest = 0, dropped = 0;
  long draws = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    const LayerSpec& layer = model.layer(l);
    if (!layer.moe()) continue;
    const Module& module = model.module(model.module_of(l));
    const int local = model.layer_ref(l).local_index;
    for (int j = 0; j < microbatches; ++j) {
      for (int g = 0; g < groups; ++g) {
        const ExpertLoad load = expert_load(module.routing, layer, local, j, g, ep);
        busiest += load.busiest_factor();
        dropped += load.dropped;
        sum.max_busiest_factor = std::max(sum.max_busiest_factor, load.busiest_factor());
        ++draws;
      }
    }
  }
  if (draws > 0) {
    sum.mean_busiest_factor = busiest / static_cast<double>(draws);
    sum.dropped = dropped / static_cast<double>(draws);
  }
  return sum;
}

}  // namespace loom
