// Dissertation §4.4.2, Algorithm 2: the smallest profiling batch whose discrete GPU
// allocation is stable under random draws.
#include "schedulers/planners/layout/entrain_planner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.hpp"
#include "core/index.hpp"

namespace loom {

int validation_trials(double alpha, double p_error) {
  if (!(alpha > 0 && alpha < 1) || !(p_error > 0 && p_error < 1))
    throw InputError("confidence and p_error must lie strictly between 0 and 1");
  // Alg 2 line 1: if all k draws agree, P(disagree) <= p_error with confidence 1 - alpha.
  return static_cast<int>(std::ceil(std::log(alpha) / std::log(1 - p_error)));
}

std::vector<int> proportional_allocation(int total_gpus, int dp, int granularity,
                                         const std::vector<double>& p) {
  const int n = isize(p);
  const int units = total_gpus / dp / granularity;
  if (units < n) {
    throw InfeasibleError(std::to_string(total_gpus) + " GPUs / DP " + std::to_string(dp) +
                          " leave " + std::to_string(units) + " units of " +
                          std::to_string(granularity) + " GPUs for " + std::to_string(n) +
                          " components (each needs one)");
  }
  // Each component gets at least one unit; the rest is shared by largest remainder.
  std::vector<int> u(p.size(), 1);
  const int free_units = units - n;
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  std::vector<std::pair<double, size_t>> remainders;  // (remainder, component)
  int given = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    // Target units beyond the minimum: the proportional share of all units, less one.
    const double share = std::max(0.0, p[i] / total * units - 1);
    const int whole = std::min(static_cast<int>(std::floor(share)), free_units - given);
    u[i] += whole;
    given += whole;
    remainders.emplace_back(share - whole, i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t r = 0; given < free_units; r = (r + 1) % remainders.size(), ++given)
    ++u[remainders[r].second];
  for (int& v : u) v *= granularity;
  return u;
}

std::string allocation_text(const std::vector<int>& allocation) {
  std::string s;
  for (size_t i = 0; i < allocation.size(); ++i)
    s += (i ? ":" : "") + std::to_string(allocation[i]);
  return s;
}

namespace {

std::vector<int> allocation_of(const PlannerInputs& in, const std::vector<Component>& components,
                               const std::vector<Sample>& batch, double* ratio) {
  const std::vector<double> p =
      macroscopic_proportions(*in.model, *in.cost, components, batch, in.profile_tp);
  *ratio = p.size() >= 2 && p[1] > 0 ? p[0] / p[1] : 0;
  return proportional_allocation(in.cluster->num_gpus(), in.dp, in.granularity, p);
}

}  // namespace

BernoulliTrial bernoulli_trial(const PlannerInputs& in, const std::vector<Component>& components,
                               const BatchSource& draw, int batch_size, int k) {
  BernoulliTrial t;
  t.batch_size = batch_size;
  double ratio = 0;
  t.reference = allocation_of(in, components, draw(batch_size), &ratio);  // lines 4-5
  t.min_ratio = t.max_ratio = ratio;
  t.allocations = {t.reference};
  t.pass = true;
  for (int i = 0; i < k; ++i) {  // lines 7-12
    const std::vector<int> test = allocation_of(in, components, draw(batch_size), &ratio);
    t.min_ratio = std::min(t.min_ratio, ratio);
    t.max_ratio = std::max(t.max_ratio, ratio);
    if (test != t.reference) t.pass = false;
    if (std::find(t.allocations.begin(), t.allocations.end(), test) == t.allocations.end())
      t.allocations.push_back(test);
  }
  // Most GPUs to the first component first, as Table 4.2 lists them (10:6, 9:7, ...).
  std::sort(t.allocations.begin(), t.allocations.end(), std::greater<>());
  return t;
}

MacroscopicProfile find_min_profiling_batch(const PlannerInputs& in, const BatchSource& draw,
                                            double alpha, double p_error, int n0, int max_batch) {
  if (n0 < 1) throw InputError("n0 (initial profiling batch) must be at least 1");
  MacroscopicProfile profile;
  profile.k = validation_trials(alpha, p_error);
  const std::vector<Component> components = model_components(*in.model);
  for (int n = n0; n <= max_batch; n *= 2) {  // line 15: double until stable
    profile.trials.push_back(bernoulli_trial(in, components, draw, n, profile.k));
    if (profile.trials.back().pass) {
      profile.b_min = n;
      break;
    }
  }
  return profile;
}

}  // namespace loom
