// K/V all-gather of All-Gather based context parallelism (dissertation §3.4.3): every rank
// needs the keys and values of all tokens to compute its rows. With LPT the shards have
// unequal sizes, so the ring is costed step by step rather than as n-1 equal steps.
#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {

AllGatherCost kv_allgather_cost(const CpPlan& plan, const KvShape& shape, const Cluster& cluster,
                                const std::vector<int>& gpus) {
  const int cp = plan.cp;
  if (isize(gpus) != cp)
    throw InputError("CP all-gather: " + std::to_string(gpus.size()) +
                     " GPUs given for cp = " + std::to_string(cp));
  for (int gpu : gpus) {
    if (gpu < 0 || gpu >= cluster.num_gpus())
      throw InputError("CP all-gather: GPU " + std::to_string(gpu) + " is not in the cluster");
  }
  AllGatherCost cost;
  double total = 0;
  for (int r = 0; r < cp; ++r) {
    cost.local_bytes.push_back(static_cast<double>(plan.rank_tokens[static_cast<size_t>(r)]) *
                               shape.bytes_per_token());
    total += cost.local_bytes.back();
  }
  for (int r = 0; r < cp; ++r)
    cost.received_bytes.push_back(total - cost.local_bytes[static_cast<size_t>(r)]);
  // Step s (1..G-1): rank r forwards shard (r - s + 1) mod G to rank r + 1; the step ends
  // with its slowest hop, and the next step needs the shard this one delivered.
  for (int s = 1; s < cp; ++s) {
    double step = 0;
    for (int r = 0; r < cp; ++r) {
      const int shard = ((r - s + 1) % cp + cp) % cp;
      step = std::max(step, transfer_time(cluster, gpus[static_cast<size_t>(r)],
                                          gpus[static_cast<std::size_t>((r + 1) % cp)],
                                          cost.local_bytes[static_cast<std::size_t>(shard)]));
    }
    cost.time_s += step;
  }
  return cost;
}

}  // namespace loom
