// Intra-GPU workload balancing (dissertation §3.3.2.2, Fig 3.3b).
//
// An attention kernel runs one thread block per query row per head; a CU that gets a heavy
// row (b5: 5 key blocks) keeps the whole head waiting while the others idle (Fig 3.7's
// downward spikes). Splitting each row into sub-blocks of at most s key blocks lets the
// CUs share a heavy row, at the price of writing s partial outputs that an aggregation
// kernel reads back and combines.
//
//   CU0 |b1|b2|b2|      no split: head ends with b5      CU0 |b1|b5a|b5c|     split, s = 2
//   CU1 |b5        |                                     CU1 |b2|b5b|b2 | + aggregation
#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <string>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

/// Thread blocks of `work_s` seconds each (alone on a CU), in launch order, with up to
/// `slots` resident per CU: the first cus x slots start at once, breadth first (one per CU,
/// then a second, ...), each later one where a block ends; a CU's resident blocks share its
/// throughput equally. Returns when the last block ends.
double shared_cu_end_s(const std::vector<double>& work_s, int cus, int slots) {
  std::vector<std::vector<double>> resident(static_cast<std::size_t>(cus));
  std::size_t next = 0;
  for (int slot = 0; slot < slots; ++slot)
    for (auto& cu : resident)
      if (next < work_s.size()) cu.push_back(work_s[next++]);
  double now = 0;
  for (;;) {
    double step = std::numeric_limits<double>::infinity();
    for (const auto& cu : resident)
      for (double left : cu) step = std::min(step, left * static_cast<double>(cu.size()));
    if (step == std::numeric_limits<double>::infinity()) return now;
    now += step;
    for (auto& cu : resident) {
      if (cu.empty()) continue;
      const double share = step / static_cast<double>(cu.size());
      const auto n_before = cu.size();
      std::erase_if(cu, [&](double& left) { return (left -= share) <= 1e-12 * now; });
      for (auto freed = n_before - cu.size(); freed > 0 && next < work_s.size(); --freed)
        cu.push_back(work_s[next++]);
    }
  }
}

/// Thread blocks in launch order on `cus` CUs, each to whichever CU frees first (as the
/// hardware dispatches them); a CU's time counts key blocks and thread blocks, whole
/// numbers, so that equal loads tie exactly. Returns when the last CU finishes.
/// With `slots` > 1 resident blocks per CU, shared_cu_end_s times them instead.
class CuListSchedule {
 public:
  CuListSchedule(int cus, double block_time_s, double thread_block_time_s, int slots = 1)
      : loads_(static_cast<std::size_t>(cus)),
        block_time_s_(block_time_s),
        thread_block_time_s_(thread_block_time_s),
        slots_(slots) {
    for (int c = 0; c < cus; ++c) free_.emplace(0.0, c);
  }
  void dispatch(std::int64_t key_blocks) {
    if (slots_ > 1) {
      shared_.push_back(static_cast<double>(key_blocks) * block_time_s_ + thread_block_time_s_);
      return;
    }
    const int cu = free_.top().second;
    free_.pop();
    Load& load = loads_[static_cast<std::size_t>(cu)];
    load.key_blocks += key_blocks;
    load.thread_blocks += 1;
    const double busy_s = static_cast<double>(load.key_blocks) * block_time_s_ +
                          static_cast<double>(load.thread_blocks) * thread_block_time_s_;
    end_s_ = std::max(end_s_, busy_s);
    free_.emplace(busy_s, cu);
  }
  double end_s() const {
    return slots_ > 1 ? shared_cu_end_s(shared_, static_cast<int>(loads_.size()), slots_) : end_s_;
  }

 private:
  struct Load {
    std::int64_t key_blocks = 0, thread_blocks = 0;
  };
  using Cu = std::pair<double, int>;  // (busy until, CU id)
  std::vector<Load> loads_;
  std::priority_queue<Cu, std::vector<Cu>, std::greater<>> free_;
  double block_time_s_, thread_block_time_s_, end_s_ = 0;
  int slots_;
  std::vector<double> shared_;  // the blocks' times, when slots_ > 1
};

void check(const IntraGpuOptions& options) {
  if (options.compute_units < 1) throw InputError("compute units must be >= 1");
  if (options.blocks_per_cu < 1) throw InputError("resident thread blocks per CU must be >= 1");
  if (options.heads < 1 || options.heads_per_kernel < 1 ||
      options.heads % options.heads_per_kernel != 0)
    throw InputError("heads must be >= 1 and a multiple of heads_per_kernel (>= 1)");
  if (options.thread_block_time_s < 0) throw InputError("thread-block time must be >= 0");
  if (options.backward_block_time_s < 0) throw InputError("backward block time must be >= 0");
}

/// `pieces` near-equal sizes summing to w, the first w % pieces of them one larger.
std::vector<std::int64_t> near_equal(std::int64_t w, std::int64_t pieces) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < pieces; ++i) sizes.push_back(w / pieces + (i < w % pieces ? 1 : 0));
  return sizes;
}

}  // namespace

std::vector<std::int64_t> split_row(std::int64_t w, std::int64_t sub_block) {
  if (w < 0) throw InputError("row workload must be >= 0");
  if (sub_block < 0) throw InputError("--sub-block: must be >= 0 key blocks");
  if (sub_block == 0 || w <= sub_block) return {w};
  // ceil(w / s) near-equal pieces: the balance of s-sized pieces with the fewest partials.
  return near_equal(w, (w + sub_block - 1) / sub_block);
}

std::vector<std::int64_t> split_row_into(std::int64_t w, int n) {
  if (w < 0) throw InputError("row workload must be >= 0");
  if (n < 0) throw InputError("--sub-blocks: must be >= 0");
  if (n == 0 || w == 0) return {w};
  return near_equal(w, std::min<std::int64_t>(w, n));
}

std::int64_t sub_block_of(std::int64_t query_blocks, const BlockSizes& sizes) {
  if (query_blocks < 1) throw InputError("sub-block size must be >= 1 query block");
  if (sizes.key_block < 1 || sizes.query_block % sizes.key_block != 0)
    throw InputError("sub-block size: the query block (" + std::to_string(sizes.query_block) +
                     " tokens) must be a multiple of the key block (" +
                     std::to_string(sizes.key_block) + ")");
  return query_blocks * (sizes.query_block / sizes.key_block);
}

double intra_gpu_time_s(const std::vector<std::int64_t>& row_workloads,
                        const IntraGpuOptions& options) {
  check(options);
  if (options.sub_block > 0 && options.sub_blocks_per_row > 0)
    throw InputError("intra-GPU split: give sub_block or sub_blocks_per_row, not both");
  // Launch order: head-major, then rows; not a sorted (LPT) order.
  CuListSchedule cus(options.compute_units, options.block_time_s, options.thread_block_time_s,
                     options.blocks_per_cu);
  std::int64_t partials = 0;
  for (int h = 0; h < options.heads_per_kernel; ++h) {
    for (std::int64_t w : row_workloads) {
      const std::vector<std::int64_t> pieces = options.sub_blocks_per_row > 0
                                                   ? split_row_into(w, options.sub_blocks_per_row)
                                                   : split_row(w, options.sub_block);
      if (pieces.size() > 1) partials += std::ssize(pieces);
      for (std::int64_t piece : pieces) cus.dispatch(piece);
    }
  }
  // Aggregation: one read-combine of every partial output, spread over all CUs.
  const double aggregation_s =
      static_cast<double>(partials) * options.aggregation_time_s / options.compute_units;
  const double kernel_s = cus.end_s() + aggregation_s;
  return kernel_s * (options.heads / options.heads_per_kernel);
}

double backward_time_s(const std::vector<std::int64_t>& key_block_loads,
                       const IntraGpuOptions& options) {
  check(options);
  if (options.backward_block_time_s == 0) return 0;
  CuListSchedule cus(options.compute_units, options.backward_block_time_s,
                     options.thread_block_time_s, options.blocks_per_cu);
  for (int h = 0; h < options.heads_per_kernel; ++h)
    for (std::int64_t load : key_block_loads) cus.dispatch(load);
  return cus.end_s() * (options.heads / options.heads_per_kernel);
}

PerCpRank<std::vector<std::int64_t>> key_block_loads(
    const CpPlan& plan, const std::vector<std::vector<KeyBlockRun>>& rows) {
  if (rows.size() != plan.owner.size())
    throw InputError("key-block loads: " + std::to_string(rows.size()) + " rows for a plan of " +
                     std::to_string(plan.owner.size()) + " query blocks");
  // Every key block of the sequence gets a thread block, seen by any row or not.
  std::int64_t tokens = 0;
  for (std::int64_t t : plan.rank_tokens) tokens += t;
  const std::int64_t key_blocks = (tokens + plan.sizes.key_block - 1) / plan.sizes.key_block;
  for (const auto& runs : rows)
    if (!runs.empty() && (runs.front().first < 0 || runs.back().last >= key_blocks))
      throw InputError("key-block loads: a row sees key blocks past the sequence's " +
                       std::to_string(key_blocks));
  // Per rank, +1 where a run starts and -1 past its end; the prefix sums are the loads.
  PerCpRank<std::vector<std::int64_t>> loads(
      plan.cp, std::vector<std::int64_t>(static_cast<std::size_t>(key_blocks) + 1, 0));
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::vector<std::int64_t>& delta = loads[CpRank{plan.owner[b]}];
    for (const KeyBlockRun& run : rows[b]) {
      ++delta[static_cast<std::size_t>(run.first)];
      --delta[static_cast<std::size_t>(run.last + 1)];
    }
  }
  for (auto& delta : loads) {
    for (std::size_t k = 1; k < delta.size(); ++k) delta[k] += delta[k - 1];
    delta.pop_back();
  }
  return loads;
}

IntraGpuOptions intra_gpu_options(const GpuSpec& gpu, const AttentionShape& shape,
                                  const BlockSizes& sizes, double kernel_efficiency,
                                  bool training) {
  if (!(kernel_efficiency > 0 && kernel_efficiency <= 1))
    throw InputError("CP attention: kernel efficiency must be in (0, 1], got " +
                     std::to_string(kernel_efficiency));
  IntraGpuOptions options;
  options.compute_units = gpu.sms;
  if (options.compute_units == 0)
    throw InputError("CP attention: no SM count known for GPU '" + gpu.name + "'");
  if (shape.heads < 1 || shape.kv_heads < 1 || shape.heads % shape.kv_heads != 0 ||
      shape.head_dim < 1)
    throw InputError("CP attention: heads must be a positive multiple of kv_heads");
  const double sm_flops = gpu.peak_flops / options.compute_units;
  const double sm_bandwidth = gpu.hbm_bandwidth / options.compute_units;
  const auto qb = static_cast<double>(sizes.query_block);
  options.block_time_s = 4.0 * qb * static_cast<double>(sizes.key_block) * shape.head_dim /
                         (sm_flops * kernel_efficiency);
  if (training) options.backward_block_time_s = kAttentionBackwardFlops * options.block_time_s;
  options.aggregation_time_s = 2.0 * qb * (shape.head_dim + 1) * 4 / sm_bandwidth;
  options.heads = shape.heads;
  options.heads_per_kernel = shape.heads / shape.kv_heads;
  return options;
}

std::vector<double> RankAttentionTimes::total_s() const {
  std::vector<double> total = forward_s;
  for (std::size_t r = 0; r < total.size(); ++r) total[r] += backward_s[r];
  return total;
}

double RankAttentionTimes::group_s() const {
  const double kernels = backward_kernels;
  double first_s = 0, kernel_s = 0;  // max_r (F_r + b_r), max_r b_r
  for (std::size_t r = 0; r < forward_s.size(); ++r) {
    const double b = backward_s[r] / kernels;
    first_s = std::max(first_s, forward_s[r] + b);
    kernel_s = std::max(kernel_s, b);
  }
  return first_s + (kernels - 1) * kernel_s;
}

RankAttentionTimes rank_attention_times_s(const CpPlan& plan, const IntraGpuOptions& options,
                                          const PerCpRank<std::vector<std::int64_t>>* loads) {
  PerCpRank<std::vector<std::int64_t>> rows(plan.cp);
  for (std::size_t b = 0; b < plan.owner.size(); ++b)
    rows[CpRank{plan.owner[b]}].push_back(plan.block_workload[b]);
  if (loads && loads->ssize() != plan.cp)
    throw InputError("backward: key-block loads for " + std::to_string(loads->ssize()) +
                     " ranks, the plan has " + std::to_string(plan.cp));
  RankAttentionTimes times;
  for (int r = 0; r < plan.cp; ++r) {
    const CpRank rank{r};
    times.forward_s.push_back(intra_gpu_time_s(rows[rank], options));
    times.backward_s.push_back(loads ? backward_time_s((*loads)[rank], options) : 0.0);
  }
  times.backward_kernels = options.heads / options.heads_per_kernel;  // checked above
  return times;
}

double cp_attention_time_s(const CpPlan& plan, const IntraGpuOptions& options,
                           const PerCpRank<std::vector<std::int64_t>>* loads) {
  return rank_attention_times_s(plan, options, loads).group_s();
}

}  // namespace loom
