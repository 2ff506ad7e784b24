#pragma once
/// Token workload-balanced context parallelism (dissertation §3.3.2, §3.4.3): the API the
/// CLI (`loom plan cp`) and the simulator's CP costing use.
///
///   mask (cp_mask.hpp) -> block workloads W_b -> distribution over CP ranks -> CpPlan
///                                                 (zigzag | LPT Alg 1 | exact ILP Eq 3.4)
///
/// Units: a "key block" of work is the attention of one query block against one key
/// block (query_block x key_block token pairs), whatever the mask inside it; a block
/// that is entirely masked out is skipped (§3.3.2.1), one that is partly masked costs as
/// much as a full one, as in block-sparse attention kernels.
#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/gpu_perf.hpp"
#include "core/index.hpp"
#include "schedulers/planners/cp/cp_mask.hpp"

namespace loom {

/// A rank of the CP group: an owner of query blocks (not a rank of the Schedule IR).
LOOM_DECLARE_ID(CpRank, PerCpRank);

struct BlockSizes {
  std::int64_t query_block = 128;  ///< N_B of Alg 1: tokens per query block (§3.3.2.1)
  std::int64_t key_block = 32;     ///< tokens per key block: the tile the workload counts
};

/// Two exact ways to count W_b (same answers; block_workloads picks the cheaper):
///   kSegments  sweep of runs of equal words: O(query blocks x segments x pieces), fast for
///              generated masks (a few long runs)
///   kBitsets   per-word key-block bitsets: O(query blocks x distinct words^2 x key
///              blocks / 64), for masks whose words change every few tokens
enum class WorkloadMethod { kAuto, kSegments, kBitsets };

/// W_b for every query block b: the number of key blocks in row b that are not fully
/// masked (Alg 1 line 5). The last query/key block may be shorter than its size.
/// Exact: the same answer as testing every token pair. Throws InputError on block sizes
/// < 1, a negative window or an empty mask.
std::vector<std::int64_t> block_workloads(const AttentionMask& mask, const BlockSizes& sizes,
                                          WorkloadMethod method = WorkloadMethod::kAuto);

/// Key blocks [first, last] of one query-block row.
struct KeyBlockRun {
  std::int64_t first = 0;
  std::int64_t last = 0;
};

/// Appends [first, last] (past every run so far) to sorted runs, merged with the last if
/// adjacent.
inline void append_run(std::vector<KeyBlockRun>& runs, std::int64_t first, std::int64_t last) {
  if (!runs.empty() && runs.back().last + 1 == first) {
    runs.back().last = last;
  } else {
    runs.push_back({first, last});
  }
}

/// Every query block's visible key blocks (those block_workloads counts) as sorted,
/// disjoint runs: the backward kernel's view, which walks the mask by key block.
std::vector<std::vector<KeyBlockRun>> visible_key_blocks(
    const AttentionMask& mask, const BlockSizes& sizes,
    WorkloadMethod method = WorkloadMethod::kAuto);

enum class CpDistribution { kZigzag, kLpt, kIlp, kContiguous, kRandom, kRandomTokens };
/// Every distribution, baselines first (the order `loom plan cp --distribution all` prints).
inline constexpr CpDistribution kCpDistributions[] = {
    CpDistribution::kZigzag,       CpDistribution::kContiguous, CpDistribution::kRandom,
    CpDistribution::kRandomTokens, CpDistribution::kLpt,        CpDistribution::kIlp};
/// "zigzag", "lpt", "ilp", "contiguous", "random", "random-tokens"
const char* to_string(CpDistribution distribution);
/// Throws InputError naming the valid names.
CpDistribution parse_cp_distribution(const std::string& name);

/// Zigzag (LLM baseline, cornstarch-arxiv §2.3 Fig 4a): the query blocks are cut into
/// 2G near-equal contiguous chunks; rank i owns chunks i and 2G-1-i.
/// Returns the owner rank of every query block.
std::vector<int> zigzag_owners(std::int64_t num_blocks, int cp);

/// Contiguous (naive ring attention, cornstarch-arxiv §6.5's "Naive Ring" baseline): the
/// query blocks cut into G near-equal contiguous runs; rank i owns run i.
std::vector<int> contiguous_owners(std::int64_t num_blocks, int cp);

/// Random (cornstarch-arxiv §5.3): the query blocks in a random order drawn from `seed`,
/// dealt to the ranks in turn, so every rank holds the same number (+-1). [AMBIG] The text
/// assigns "tokens"; this deals whole query blocks, which keeps the block sparsity a
/// block-sparse kernel needs; plan_cp_random_tokens is the text's reading. Works for any
/// count of items (random tokens deals `seq` of them). Deterministic for a seed, on every
/// platform.
std::vector<int> random_owners(std::int64_t num_blocks, int cp, std::uint64_t seed);

/// LPT (Alg 1 with the descending sort of its text, [AMBIG] in the notes): blocks stably
/// sorted by workload descending, each given to the least-loaded rank, ties to the lowest
/// rank id. Deterministic. Returns the owner rank of every query block.
std::vector<int> lpt_owners(const std::vector<std::int64_t>& workloads, int cp);

/// max(ceil(total / cp), max W_b): no distribution can do better.
std::int64_t makespan_lower_bound(const std::vector<std::int64_t>& workloads, int cp);

/// Stops for GLPK's branch and bound. When the time limit stops it, the result depends on
/// the machine's speed; a node limit stops it at the same point on every run.
struct IlpOptions {
  double time_limit_s = 10;     ///< wall-clock limit
  std::int64_t node_limit = 0;  ///< subproblems to explore; 0 = no limit
};

struct IlpResult {
  std::vector<int> owners;       ///< best assignment found (LPT's if GLPK found none better)
  std::int64_t makespan = 0;     ///< its makespan, key blocks
  std::int64_t lower_bound = 0;  ///< proven lower bound on the optimum
  bool optimal = false;          ///< makespan == optimum (proven)
};

/// Eq 3.4 solved exactly with GLPK: min C s.t. every block on one rank, every rank's load
/// <= C. Blocks of equal workload are interchangeable, so the model uses one integer
/// count n[w][g] per (distinct workload, rank) instead of one binary per (block, rank),
/// with loads ordered across ranks to remove rank symmetry; LPT's makespan is the
/// incumbent. Stops at the time limit with the best assignment and bound so far.
IlpResult ilp_owners(const std::vector<std::int64_t>& workloads, int cp,
                     const IlpOptions& options = {});

/// A distribution's outcome. Workloads in key blocks (see the file comment).
struct CpPlan {
  CpDistribution distribution = CpDistribution::kLpt;
  int cp = 1;
  BlockSizes sizes;
  std::vector<std::int64_t> block_workload;  ///< W_b per query block
  std::vector<int> owner;                    ///< owner rank per query block
  std::vector<std::int64_t> rank_workload;   ///< sum of W_b owned, per rank
  std::vector<std::int64_t> rank_tokens;     ///< query tokens owned, per rank
  std::int64_t makespan = 0;                 ///< max rank_workload
  std::int64_t total_workload = 0;           ///< sum of W_b
  /// Proven lower bound on the optimum (makespan_lower_bound, or the ILP's if better);
  /// `optimal`: makespan proven optimal (always true when it equals the bound).
  std::int64_t lower_bound = 0;
  bool optimal = false;

  /// Rank g's share of the attention time relative to the slowest rank: W_g / makespan
  /// (1 for the critical rank; idle fraction = 1 - this).
  double time_fraction(int rank) const;
  /// makespan / (total / cp): 1 = perfectly balanced.
  double imbalance() const;
};

struct CpPlanRequest {
  int cp = 1;
  BlockSizes sizes;
  CpDistribution distribution = CpDistribution::kLpt;
  IlpOptions ilp;
  std::uint64_t random_seed = 1;  ///< kRandom's draw
};

/// Workloads, owners and per-rank totals for one mask and distribution.
/// Throws InputError on cp < 1.
CpPlan plan_cp(const AttentionMask& mask, const CpPlanRequest& request);
/// Same from precomputed workloads (one W_b per query block of `sizes.query_block` tokens;
/// `seq` tokens in all, for the token counts). Every distribution but kRandomTokens, whose
/// blocks are not the mask's (InputError).
CpPlan plan_cp_from_workloads(const std::vector<std::int64_t>& workloads, std::int64_t seq,
                              const CpPlanRequest& request);
/// The plan of given owners and per-rank token counts: per-rank workloads, makespan, lower
/// bound. Throws InputError unless there is one owner per workload and one count per rank.
CpPlan plan_from_owners(CpDistribution distribution, std::vector<std::int64_t> workloads,
                        std::vector<int> owners, std::vector<std::int64_t> rank_tokens,
                        const CpPlanRequest& request);

/// A plan whose query blocks are the ranks' own tokens, with what each block sees.
struct TokenDealtPlan {
  /// Block b holds sizes.query_block of its owner's tokens (its last fewer), rank 0's blocks
  /// first; block_workload counts the gathered key blocks it sees.
  CpPlan plan;
  /// Per block, its visible key blocks in the all-gather's order (rank 0's tokens first):
  /// what visible_key_blocks gives for a block-dealt plan, for key_block_loads.
  std::vector<std::vector<KeyBlockRun>> rows;
};

/// Random tokens (cornstarch-arxiv §5.3 as written: it "randomly assigns tokens to GPUs"):
/// random_owners over the tokens (equal counts +-1, from request.random_seed); each rank
/// keeps its tokens in sequence order and cuts them into query blocks, and the K/V
/// all-gather lays the ranks' tokens out rank after rank, cut into key blocks. A block pair
/// counts when any of its token pairs attends (exact, sliding window included). The text's
/// reading of "random"; `kRandom` deals whole query blocks instead.
TokenDealtPlan plan_cp_random_tokens(const AttentionMask& mask, const CpPlanRequest& request);

// ---- Intra-GPU balancing (§3.3.2.2) ----------------------------------------------------

struct IntraGpuOptions {
  int compute_units = 84;  ///< CUs (SMs) per GPU; A40 has 84
  /// Thread blocks resident on a CU at once, sharing its throughput (1: one at a time,
  /// the next where one ends).
  int blocks_per_cu = 1;
  /// How a row is split ([AMBIG] §3.3.2.2 gives both forms; set at most one):
  ///   sub_blocks_per_row  n: each row into min(W_b, n) near-equal sub-blocks (the text's
  ///                       "16-32 subblocks per block": Loom's reading; the bench uses 16)
  ///   sub_block           s: sub-blocks of at most s key blocks (Fig 3.3b, s = 2)
  /// Both 0: no split.
  int sub_blocks_per_row = 0;
  std::int64_t sub_block = 0;
  int heads = 1;  ///< attention heads of the layer on this GPU
  /// Heads one kernel computes together (§3.4.3: "one or a few heads" per step, while the
  /// next heads' K/V arrive); kernels run one after another (Fig 3.7). Divides `heads`.
  int heads_per_kernel = 1;
  double block_time_s = 1e-6;        ///< one key block of work on one CU, one head
  double aggregation_time_s = 2e-7;  ///< per partial output of a split row, on one CU
  /// A CU's fixed time per thread block (a row, or one sub-block of a split row): loading
  /// its query tile, writing its output. 0 by default: the FLOPs alone.
  double thread_block_time_s = 0;
  /// The backward kernel's time per (query block x key block), one head; 0 (the default)
  /// times the forward pass only. intra_gpu_options sets it with `training`.
  double backward_block_time_s = 0;
};

/// One GPU's attention time for the query blocks it owns (their workloads, in launch
/// order): per kernel, the rows (or their sub-blocks) of each of its heads go to whichever
/// CU frees first, as the hardware dispatches thread blocks, each taking its key blocks x
/// block_time_s plus thread_block_time_s; a kernel ends when its last
/// CU does (the next kernel cannot start earlier, §3.5.4). A row split into k > 1 sub-blocks writes
/// k partial outputs that an aggregation pass reads back: k x aggregation_time_s, spread over the
/// CUs. Returns seconds for all heads. Throws InputError on options out of range.
double intra_gpu_time_s(const std::vector<std::int64_t>& row_workloads,
                        const IntraGpuOptions& options);

/// The attention shape of one layer on one GPU of the CP group.
struct AttentionShape {
  int heads = 32;    ///< query heads
  int kv_heads = 8;  ///< key/value heads (GQA)
  int head_dim = 128;
};

/// IntraGpuOptions with times derived from the GPU: one key block of work is the QK^T and
/// PV products of query_block x key_block tokens, 4 x qb x kb x head_dim FLOPs, on one SM at
/// its share of the dense peak; one partial output is qb x (head_dim + 1) fp32 values (with
/// the log-sum-exp) written and read back at one SM's share of HBM bandwidth. One kernel
/// per K/V head group (heads / kv_heads heads). No split; set sub_blocks_per_row after.
/// `kernel_efficiency` in (0, 1] is the fraction of that share the attention kernel reaches
/// on a key block (1: the peak, a floor on the time); it slows the key blocks only, not the
/// aggregation, which is bound by HBM. Throws InputError for a GPU without a known SM count
/// or an efficiency outside (0, 1].
/// With `training` the backward kernel is timed too: its key blocks take
/// kAttentionBackwardFlops (core/gpu_perf.hpp) times a forward one's FLOPs at the same
/// efficiency.
IntraGpuOptions intra_gpu_options(const GpuSpec& gpu, const AttentionShape& shape,
                                  const BlockSizes& sizes, double kernel_efficiency = 1.0,
                                  bool training = false);

/// Per rank, per key block: how many of the rank's query blocks see it (`rows`:
/// visible_key_blocks of the plan's mask). The backward kernel runs one thread block per
/// gathered key block, looping over the rank's query blocks (the Cornstarch artifact's
/// bitfield-attention backward: one program per 32-key block per head), so this is its
/// work per thread block. A rank's loads sum to its rank_workload.
PerCpRank<std::vector<std::int64_t>> key_block_loads(
    const CpPlan& plan, const std::vector<std::vector<KeyBlockRun>>& rows);

/// One GPU's backward attention time: per kernel (heads_per_kernel heads), one thread block
/// per key block and head, list-scheduled on the CUs in launch order, each taking its load
/// x backward_block_time_s plus thread_block_time_s. No split: the column thread blocks
/// outnumber the CUs. 0 when backward_block_time_s is 0.
double backward_time_s(const std::vector<std::int64_t>& key_block_loads,
                       const IntraGpuOptions& options);

/// One layer's attention time on each rank of the CP group, by pass.
struct RankAttentionTimes {
  std::vector<double> forward_s;   ///< intra_gpu_time_s over the rank's rows
  std::vector<double> backward_s;  ///< backward_time_s; zeros when the backward is not timed
  int backward_kernels = 1;        ///< the backward's kernels per rank, alike (heads / per kernel)
  /// Per rank, forward plus backward.
  std::vector<double> total_s() const;
  /// The CP group's time. Collectives hold the ranks together (the Cornstarch artifact's
  /// context_parallel_bitfield_attention.py, §3.4.3): each backward kernel ends in a dK/dV
  /// reduce-scatter that every rank joins before its next kernel, so the group waits for
  /// the slowest rank's forward and first backward kernel, then for the slowest rank's
  /// kernel each time: max_r (F_r + b_r) + (kernels - 1) x max_r b_r, b_r = B_r / kernels.
  /// A rank that is slowest in one pass cannot make up for it in the other. (The next
  /// layer's K/V all-gather likewise waits for every rank's forward.)
  double group_s() const;
};

/// Each rank's intra_gpu_time_s over the rows it owns, in sequence order, and its
/// backward_time_s when `loads` (key_block_loads) is given and the options time it.
RankAttentionTimes rank_attention_times_s(
    const CpPlan& plan, const IntraGpuOptions& options,
    const PerCpRank<std::vector<std::int64_t>>* loads = nullptr);
/// The CP group's attention time for one layer: rank_attention_times_s(...).group_s().
double cp_attention_time_s(const CpPlan& plan, const IntraGpuOptions& options,
                           const PerCpRank<std::vector<std::int64_t>>* loads = nullptr);

/// The sub-block sizes row workload `w` splits into: ceil(w / sub_block) near-equal
/// pieces (each <= sub_block, sum == w); a single piece when sub_block is 0 or >= w.
std::vector<std::int64_t> split_row(std::int64_t w, std::int64_t sub_block);
/// min(w, n) near-equal pieces summing to w (one piece when n is 0 or w is 0).
std::vector<std::int64_t> split_row_into(std::int64_t w, int n);
/// IntraGpuOptions::sub_block for sub-blocks of `query_blocks` (>= 1) query blocks' worth
/// of keys (the paper's blocks are N_B tokens square); InputError unless the query block
/// is a whole number of key blocks.
std::int64_t sub_block_of(std::int64_t query_blocks, const BlockSizes& sizes);

// ---- K/V all-gather (§3.4.3) ------------------------------------------------------------

struct KvShape {
  int kv_heads = 8;
  int head_dim = 128;
  int dtype_bytes = 2;
  /// Bytes of keys plus values of one token.
  double bytes_per_token() const { return 2.0 * kv_heads * head_dim * dtype_bytes; }
};

struct AllGatherCost {
  std::vector<double> local_bytes;     ///< K/V of the rank's own tokens
  std::vector<double> received_bytes;  ///< K/V of every other rank's tokens
  double time_s = 0;                   ///< uncontended ring all-gather time
};

/// All-gather of keys and values over the CP group: every rank ends with the K/V of all
/// tokens. Ring over `gpus` (rank r on GPU gpus[r]) in G-1 steps; at step s rank r
/// forwards the shard of rank (r - s) mod G to its successor, so shards of unequal size
/// (LPT) cost what they weigh. A step ends when its slowest hop does
/// (transfer_time of core/cluster.hpp). Throws InputError when gpus.size() != cp.
AllGatherCost kv_allgather_cost(const CpPlan& plan, const KvShape& shape, const Cluster& cluster,
                                const std::vector<int>& gpus);

}  // namespace loom
