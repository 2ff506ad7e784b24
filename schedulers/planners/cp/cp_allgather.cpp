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
  const std::size_t group = gpus.size();  // G == cp
  AllGatherCost cost;
  double total = 0;
  for (std::size_t r = 0; r < group; ++r) {
    cost.local_bytes.push_back(static_cast<double>(plan.rank_tokens[r]) * shape.bytes_per_token());
    total += cost.local_bytes.back();
  }
  for (const double local : cost.local_bytes) cost.received_bytes.push_back(total - local);
  // Step s (1..G-1): rank r forwards shard (r - s + 1) mod G to rank r + 1; the step ends
  // with its slowest hop, and the next step needs the shard this one delivered.
  for (std::size_t s = 1; s < group; ++s) {
    double step = 0;
    for (std::size_t r = 0; r < group; ++r) {
      const std::size_t shard = (r + group + 1 - s) % group;  // (r - s + 1) mod G, s < G
      step = std::max(
          step, transfer_time(cluster, gpus[r], gpus[(r + 1) % group], cost.local_bytes[shard]));
    }
    cost.time_s += step;
  }
  return cost;
}

}  // namespace loom
