#include "replay/policies.hpp"

#include "core/errors.hpp"

namespace loom {

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"oobleck", "varuna-like", "bamboo-like"};
  return names;
}

std::unique_ptr<ReplayPolicy> make_policy(const std::string& name, const PolicySetup& setup) {
  if (name == "oobleck") return make_oobleck_policy(setup);
  if (name == "varuna-like") return make_varuna_policy(setup);
  if (name == "bamboo-like") return make_bamboo_policy(setup);
  std::string valid;
  for (const std::string& n : policy_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("--policy " + name + ": unknown policy (valid: " + valid + ")");
}

Layout grid_layout(int depth, int replicas, const PolicySetup& setup, int microbatch_size) {
  Layout layout;
  const int mbs = microbatch_size > 0 ? microbatch_size : setup.microbatch_size;
  const int microbatches_total = (setup.global_batch + mbs - 1) / mbs;
  const int per_replica = (microbatches_total + replicas - 1) / replicas;
  for (int i = 0; i < replicas; ++i) layout.pipelines.push_back({depth, {}, per_replica});
  layout.activation_checkpointing = true;  // Varuna-like; Bamboo-like turns it off
  return layout;
}

}  // namespace loom
