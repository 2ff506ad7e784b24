// Token distributions over the CP group: zigzag (the LLM baseline), contiguous (naive ring),
// random (cornstarch-arxiv §5.3) and LPT (dissertation Alg 1), and the plan that gathers
// their per-rank totals. The ILP is in cp_ilp.cpp, random tokens in cp_random_tokens.cpp.
#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <random>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

void check_cp(int cp) {
  if (cp < 1) throw InputError("--cp: the context-parallel degree must be >= 1");
}

/// Appends `rank` as the owner of run c of `runs` near-equal contiguous runs of `num_blocks`
/// blocks, [c*n/runs, (c+1)*n/runs); runs are appended in block order.
void append_run(std::vector<int>& owners, std::int64_t c, std::int64_t runs,
                std::int64_t num_blocks, int rank) {
  const std::int64_t end = (c + 1) * num_blocks / runs;
  while (std::ssize(owners) < end) owners.push_back(rank);
}

}  // namespace

const char* to_string(CpDistribution distribution) {
  switch (distribution) {
    case CpDistribution::kZigzag:
      return "zigzag";
    case CpDistribution::kLpt:
      return "lpt";
    case CpDistribution::kIlp:
      return "ilp";
    case CpDistribution::kContiguous:
      return "contiguous";
    case CpDistribution::kRandom:
      return "random";
    case CpDistribution::kRandomTokens:
      return "random-tokens";
  }
  return "?";
}

CpDistribution parse_cp_distribution(const std::string& name) {
  std::string valid;
  for (CpDistribution d : kCpDistributions) {
    if (name == to_string(d)) return d;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(d));
  }
  throw InputError("--distribution: unknown distribution '" + name + "' (valid: " + valid + ")");
}

std::vector<int> zigzag_owners(std::int64_t num_blocks, int cp) {
  check_cp(cp);
  // 2G chunks; rank i owns chunks i and 2G-1-i, which pairs an early (light, causal)
  // chunk with a late (heavy) one: those of ranks 0..G-1, then of ranks G-1..0.
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(cp);
  std::vector<int> owners;
  for (int rank = 0; rank < cp; ++rank) append_run(owners, rank, chunks, num_blocks, rank);
  for (int rank = cp - 1; rank >= 0; --rank)
    append_run(owners, chunks - 1 - rank, chunks, num_blocks, rank);
  return owners;
}

std::vector<int> contiguous_owners(std::int64_t num_blocks, int cp) {
  check_cp(cp);
  std::vector<int> owners;
  for (int rank = 0; rank < cp; ++rank) append_run(owners, rank, cp, num_blocks, rank);
  return owners;
}

std::vector<int> random_owners(std::int64_t num_blocks, int cp, std::uint64_t seed) {
  check_cp(cp);
  // Fisher-Yates with mt19937_64 (fully specified by the standard) and a plain modulo, so
  // the draw is the same with every standard library; the modulo's bias is at most
  // n / 2^64 (2^-36 at the CLI's longest sequence).
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_blocks));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 rng(seed);
  for (std::int64_t i = num_blocks - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)],
              order[static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(i + 1))]);
  std::vector<int> owners(order.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    owners[static_cast<std::size_t>(order[i])] = static_cast<int>(i % static_cast<std::size_t>(cp));
  return owners;
}

std::vector<int> lpt_owners(const std::vector<std::int64_t>& workloads, int cp) {
  check_cp(cp);
  // Alg 1 pops the least-loaded GPU for each block; its text sorts blocks by workload
  // descending first (the listing omits it: [AMBIG] in the reading notes). A stable sort
  // keeps equal workloads in sequence order, and the heap orders (load, rank) so ties go
  // to the lowest rank id: the result is fully determined by the workloads.
  std::vector<std::size_t> order(workloads.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return workloads[a] > workloads[b]; });
  using Load = std::pair<std::int64_t, int>;  // (assigned workload, rank)
  std::priority_queue<Load, std::vector<Load>, std::greater<>> heap;
  for (int g = 0; g < cp; ++g) heap.emplace(0, g);
  std::vector<int> owners(workloads.size());
  for (std::size_t b : order) {
    auto [load, rank] = heap.top();
    heap.pop();
    owners[b] = rank;
    heap.emplace(load + workloads[b], rank);
  }
  return owners;
}

std::int64_t makespan_lower_bound(const std::vector<std::int64_t>& workloads, int cp) {
  check_cp(cp);
  std::int64_t total = 0;
  std::int64_t largest = 0;
  for (std::int64_t w : workloads) {
    total += w;
    largest = std::max(largest, w);
  }
  return std::max(largest, (total + cp - 1) / cp);
}

double CpPlan::time_fraction(int rank) const {
  if (makespan == 0) return 1;
  return static_cast<double>(rank_workload[static_cast<size_t>(rank)]) /
         static_cast<double>(makespan);
}

double CpPlan::imbalance() const {
  if (total_workload == 0) return 1;
  return static_cast<double>(makespan) * cp / static_cast<double>(total_workload);
}

CpPlan plan_from_owners(CpDistribution distribution, std::vector<std::int64_t> workloads,
                        std::vector<int> owners, std::vector<std::int64_t> rank_tokens,
                        const CpPlanRequest& request) {
  check_cp(request.cp);
  if (owners.size() != workloads.size())
    throw InputError("CP plan: " + std::to_string(owners.size()) + " owners for " +
                     std::to_string(workloads.size()) + " query blocks");
  if (std::ssize(rank_tokens) != request.cp)
    throw InputError("CP plan: token counts for " + std::to_string(rank_tokens.size()) +
                     " ranks, the group has " + std::to_string(request.cp));
  CpPlan plan;
  plan.distribution = distribution;
  plan.cp = request.cp;
  plan.sizes = request.sizes;
  PerCpRank<std::int64_t> rank_workload(request.cp, 0);
  for (std::size_t b = 0; b < workloads.size(); ++b) {
    rank_workload[CpRank{owners[b]}] += workloads[b];
    plan.total_workload += workloads[b];
  }
  plan.rank_workload.assign(rank_workload.begin(), rank_workload.end());
  plan.rank_tokens = std::move(rank_tokens);
  plan.makespan = *std::max_element(plan.rank_workload.begin(), plan.rank_workload.end());
  plan.lower_bound = makespan_lower_bound(workloads, request.cp);
  plan.optimal = plan.makespan == plan.lower_bound;
  plan.block_workload = std::move(workloads);
  plan.owner = std::move(owners);
  return plan;
}

CpPlan plan_cp_from_workloads(const std::vector<std::int64_t>& workloads, std::int64_t seq,
                              const CpPlanRequest& request) {
  check_cp(request.cp);
  std::vector<int> owners;
  IlpResult ilp;
  switch (request.distribution) {
    case CpDistribution::kZigzag:
      owners = zigzag_owners(std::ssize(workloads), request.cp);
      break;
    case CpDistribution::kLpt:
      owners = lpt_owners(workloads, request.cp);
      break;
    case CpDistribution::kContiguous:
      owners = contiguous_owners(std::ssize(workloads), request.cp);
      break;
    case CpDistribution::kRandom:
      owners = random_owners(std::ssize(workloads), request.cp, request.random_seed);
      break;
    case CpDistribution::kRandomTokens:
      throw InputError(
          "random-tokens deals single tokens, so its query blocks are not the mask's: plan it "
          "from the mask (plan_cp)");
    case CpDistribution::kIlp:
      ilp = ilp_owners(workloads, request.cp, request.ilp);
      owners = std::move(ilp.owners);
      break;
  }
  std::vector<std::int64_t> rank_tokens(static_cast<std::size_t>(request.cp), 0);
  for (std::size_t b = 0; b < owners.size(); ++b) {  // the sequence's last block may be short
    const std::int64_t first = static_cast<std::int64_t>(b) * request.sizes.query_block;
    rank_tokens[static_cast<std::size_t>(owners[b])] +=
        std::min(request.sizes.query_block, seq - first);
  }
  CpPlan plan = plan_from_owners(request.distribution, workloads, std::move(owners),
                                 std::move(rank_tokens), request);
  plan.lower_bound = std::max(plan.lower_bound, ilp.lower_bound);
  plan.optimal = ilp.optimal || plan.makespan == plan.lower_bound;
  return plan;
}

CpPlan plan_cp(const AttentionMask& mask, const CpPlanRequest& request) {
  check_cp(request.cp);
  if (request.distribution == CpDistribution::kRandomTokens)
    return plan_cp_random_tokens(mask, request).plan;
  return plan_cp_from_workloads(block_workloads(mask, request.sizes), mask.size(), request);
}

}  // namespace loom
