#include "core/variability.hpp"

#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <variant>

#include "core/workload_cost.hpp"

namespace loom {

std::vector<ComponentForwardStats> component_forward_stats(const Schedule& schedule,
                                                           const Model& model) {
  const std::vector<Component> comps = model_components(model);
  // Schedule module index -> component, through the module's first layer.
  PerModule<std::optional<size_t>> comp_of(schedule.module_names.ssize());
  for (const ModuleId m : schedule.module_names.ids()) {
    const std::optional<ModuleId> mi = model.module_index(schedule.module_names[m]);
    if (!mi) continue;
    for (size_t c = 0; c < comps.size(); ++c) {
      for (int l : comps[c].layers) {
        if (model.module_of(l) == *mi) comp_of[m] = c;
      }
    }
  }
  // (component, replica, microbatch) -> forward seconds over all stages.
  std::map<std::tuple<size_t, ReplicaId, MicrobatchId>, double> sums;
  for (const RankId r : schedule.rank_ids()) {
    const ReplicaId replica = schedule.ranks[r].replica;
    for (const Op& op : schedule.programs[r]) {
      const Compute* c = std::get_if<Compute>(&op);
      if (!c || c->pass != Pass::kF || c->redundant) continue;
      const std::optional<size_t> comp = comp_of[c->module];
      if (comp) sums[{*comp, replica, c->microbatch}] += c->seconds;
    }
  }
  std::vector<ComponentForwardStats> out(comps.size());
  for (size_t c = 0; c < comps.size(); ++c) out[c].component = comps[c].name;
  for (const auto& [key, s] : sums) out[std::get<0>(key)].per_microbatch.push_back(s);
  for (ComponentForwardStats& st : out) {
    if (st.per_microbatch.empty()) continue;
    const double n = static_cast<double>(st.per_microbatch.size());
    for (double v : st.per_microbatch) st.mean_s += v / n;
    double q = 0;
    for (double v : st.per_microbatch) q += (v - st.mean_s) * (v - st.mean_s);
    st.std_s = std::sqrt(q / n);
  }
  return out;
}

}  // namespace loom
