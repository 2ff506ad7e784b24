#include "replay/layout.hpp"

#include "core/errors.hpp"

namespace loom {

int Layout::nodes() const {
  int n = 0;
  for (const PipelineLayout& p : pipelines) n += p.nodes;
  return n;
}

std::string Layout::key() const {
  // Group equal pipelines so that the order in which a policy lists them does not matter.
  std::map<std::string, int> groups;
  for (const PipelineLayout& p : pipelines) {
    std::string g = "[" + std::to_string(p.nodes) + ":";
    for (size_t i = 0; i < p.stage_layers.size(); ++i)
      g += (i ? "," : "") + std::to_string(p.stage_layers[i]);
    g += "]/" + std::to_string(p.microbatches);
    for (size_t i = 0; i < p.failed_over.size(); ++i)
      g += (i ? "," : " failed over ") + std::to_string(p.failed_over[i]);
    ++groups[g];
  }
  std::string key;
  for (const auto& [g, count] : groups)
    key += (key.empty() ? "" : " ") + std::to_string(count) + "x" + g;
  if (activation_checkpointing) key += " recompute";
  if (!scheduler.empty()) key += " " + scheduler;
  if (microbatch_size != 0) key += " mbs " + std::to_string(microbatch_size);
  if (activation_factor != 1) key += " act*" + std::to_string(activation_factor);
  return key;
}

double MemoizedTimer::operator()(const Layout& layout) {
  const std::string key = layout.key();
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  if (auto it = infeasible_.find(key); it != infeasible_.end()) {
    if (it->second.first) throw TooFewNodesError(it->second.second);
    throw InfeasibleError(it->second.second);
  }
  try {
    const double t = timer_(layout);
    cache_.emplace(key, t);
    return t;
  } catch (const TooFewNodesError& e) {
    infeasible_.emplace(key, std::make_pair(true, std::string(e.what())));
    throw;
  } catch (const InfeasibleError& e) {
    infeasible_.emplace(key, std::make_pair(false, std::string(e.what())));
    throw;
  }
}

}  // namespace loom
