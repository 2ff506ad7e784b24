// loom plan cp: context-parallel token distribution for one attention mask
// (dissertation §3.3.2): per-GPU workload and makespan, LPT vs zigzag vs ILP.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

struct PlanCpOptions {
  std::string mask = "embedded";
  std::string distribution = "lpt";
  MaskSpec spec;
  CpPlanRequest request;
  bool json = false;
  bool picture = false;
  std::string mask_file;
  // Attention-time estimate (cp_intra_gpu.cpp), on when --gpu is given.
  std::string gpu;
  AttentionShape shape{40, 8, 128};  // LLM-L of Table 3.1
  // Intra-GPU split (§3.3.2.2, [AMBIG]): the text's "16-32 subblocks per block" read as
  // pieces per row (--sub-blocks), or as a piece's size, as its "2 subblocks per block"
  // names Fig 3.3b's sub-blocks of 2 blocks (--sub-block-size, in N_B-token blocks).
  int sub_blocks = 16;
  std::int64_t sub_block_size = 0;
  double kernel_efficiency = 1.0;  // of an SM's share of the dense peak, per key block
  double thread_block_us = 0;      // a CU's fixed time per thread block
  int blocks_per_cu = 1;           // thread blocks resident on a CU at once
  std::string pass = "forward";    // or "training": the backward kernel too
};

/// --distribution's values: every distribution, then "all".
std::vector<std::string> distribution_names() {
  std::vector<std::string> names;
  for (CpDistribution d : kCpDistributions) names.emplace_back(to_string(d));
  names.emplace_back("all");
  return names;
}

void add_mask_options(CLI::App& sub, PlanCpOptions& o) {
  sub.add_option("--mask", o.mask,
                 "Mask family: causal, prefix, embedded, packed (Fig 3.5), lambda, "
                 "causal-blockwise, shared-question (DCP, Table 3.4)")
      ->capture_default_str()
      ->check(CLI::IsMember(mask_kind_names()));
  sub.add_option("--mask-file", o.mask_file,
                 "Read the bitfield mask from a file instead: one 64-bit word per token and "
                 "line, decimal or 0x-hex; '#' starts a comment (overrides --mask and --seq)");
  sub.add_option("--seq", o.spec.seq, "Sequence length, tokens")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 28));
  sub.add_option("--modality-fraction", o.spec.modality_fraction,
                 "prefix/embedded/packed: share of encoder tokens, in [0, 1)")
      ->capture_default_str()
      ->check(finite_range(0.0, 0.999999));
  sub.add_option("--modalities", o.spec.modalities, "prefix/embedded/packed: encoders")
      ->capture_default_str()
      ->check(CLI::Range(1, 61));
  sub.add_option("--segments", o.spec.segments,
                 "embedded/packed: segments per modality per sequence")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub.add_option("--packed-sequences", o.spec.packed_sequences, "packed: sequences in the pack")
      ->capture_default_str()
      ->check(CLI::Range(1, 61));
  sub.add_option("--sink-tokens", o.spec.sink_tokens, "lambda: attention-sink tokens")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--window", o.spec.window, "lambda: causal sliding window, tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub.add_option("--blocks", o.spec.blocks, "causal-blockwise: blocks")
      ->capture_default_str()
      ->check(CLI::Range(1, 62));
  sub.add_option("--answers", o.spec.answers, "shared-question: answers")
      ->capture_default_str()
      ->check(CLI::Range(1, 61));
  sub.add_option("--question-fraction", o.spec.question_fraction,
                 "shared-question: share of tokens in the question, in (0, 1)")
      ->capture_default_str()
      ->check(finite_range(0.000001, 0.999999));
  sub.add_option("--seed", o.spec.seed, "embedded/packed: seed of the random placement")
      ->capture_default_str();
}

void add_plan_options(CLI::App& sub, PlanCpOptions& o) {
  sub.add_option("--cp", o.request.cp, "Context-parallel degree (GPUs in the CP group)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("--distribution", o.distribution,
                 "zigzag (LLM baseline), lpt (Alg 1), ilp (exact, GLPK), contiguous (naive "
                 "ring attention), random (cornstarch-arxiv §5.3: query blocks in a random "
                 "order), random-tokens (§5.3 as written: single tokens, each rank's then cut "
                 "into query blocks; no sliding window), or all side by side")
      ->capture_default_str()
      ->check(CLI::IsMember(distribution_names()));
  sub.add_option("--random-seed", o.request.random_seed,
                 "Seed of the random distributions' draw (the mask's is --seed)")
      ->capture_default_str();
  sub.add_option("--query-block", o.request.sizes.query_block, "Query block N_B, tokens")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  sub.add_option("--key-block", o.request.sizes.key_block,
                 "Key block, tokens: the tile the workload counts")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  sub.add_option("--ilp-time-limit", o.request.ilp.time_limit_s,
                 "Seconds GLPK may search before reporting its best assignment and bound")
      ->capture_default_str()
      ->check(finite_range(0.001, 86400.0, " s"));
  CLI::Option* gpu =
      sub.add_option("--gpu", o.gpu,
                     "Also estimate each rank's attention time for one layer on this GPU (a "
                     "cluster.gpu preset: A40, A100-80GB, H100-SXM, ...): CU list-scheduling "
                     "model, one kernel per K/V head group");
  sub.add_option("--heads", o.shape.heads, "With --gpu: query heads")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("--kv-heads", o.shape.kv_heads, "With --gpu: key/value heads (divides --heads)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  sub.add_option("--head-dim", o.shape.head_dim, "With --gpu: head dimension")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  CLI::Option* pieces =
      sub.add_option("--sub-blocks", o.sub_blocks,
                     "With --gpu: intra-GPU balancing, each query-block row split into this "
                     "many near-equal sub-blocks; 0 = off")
          ->capture_default_str()
          ->check(CLI::Range(0, 4096));
  sub.add_option("--sub-block-size", o.sub_block_size,
                 "With --gpu: split rows instead into sub-blocks of at most this many query "
                 "blocks' worth of keys (N x --query-block tokens): the other reading of the "
                 "paper's \"16-32 subblocks per block\" (Fig 3.3b: size 2)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->excludes(pieces)
      ->needs(gpu);
  sub.add_option("--kernel-efficiency", o.kernel_efficiency,
                 "With --gpu: fraction of an SM's share of the dense peak the attention kernel "
                 "reaches on a key block (1 = peak, a floor on the time; the partial outputs' "
                 "aggregation stays HBM-bound)")
      ->capture_default_str()
      ->check(finite_range(1e-6, 1.0))
      ->needs(gpu);
  sub.add_option("--thread-block-us", o.thread_block_us,
                 "With --gpu: a CU's fixed time per thread block (a row, or one sub-block of a "
                 "split row), microseconds: loading its query tile, writing its output")
      ->capture_default_str()
      ->check(finite_range(0.0, 1e6, " us"))
      ->needs(gpu);
  sub.add_option("--blocks-per-cu", o.blocks_per_cu,
                 "With --gpu: thread blocks resident on a CU at once, sharing its throughput "
                 "(the kernel's occupancy); 1 runs them one at a time, the next on the CU "
                 "that frees first")
      ->capture_default_str()
      ->check(CLI::Range(1, 32))
      ->needs(gpu);
  sub.add_option("--pass", o.pass,
                 "With --gpu: time the forward kernels only, or a training step's forward and "
                 "backward (one backward thread block per key block, looping over the rank's "
                 "query blocks, at 2.5x a forward key block's FLOPs; the ranks wait for each "
                 "other at each backward kernel's dK/dV reduce-scatter)")
      ->capture_default_str()
      ->check(CLI::IsMember({"forward", "training"}))
      ->needs(gpu);
  sub.add_option("--ilp-node-limit", o.request.ilp.node_limit,
                 "Subproblems GLPK may explore (0 = no limit); unlike the time limit, "
                 "stops at the same point on every run")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub.add_flag("--json", o.json, "Print JSON, with the owner rank of every query block");
  sub.add_flag("--picture", o.picture,
               "Print the token-level mask instead (rows = queries, # = attends; --seq <= 256)");
}

/// The intra-GPU split in words, for the text output.
std::string split_name(const PlanCpOptions& o) {
  if (o.sub_block_size > 0)
    return "sub-blocks of " + std::to_string(o.sub_block_size * o.request.sizes.query_block) +
           " keys";
  if (o.sub_blocks == 0) return "no intra-GPU split";
  return std::to_string(o.sub_blocks) + " sub-blocks per row";
}

using Rows = std::vector<std::vector<KeyBlockRun>>;

/// Each plan's attention seconds per rank; empty when --gpu is not given. `rows`: per plan,
/// its blocks' visible key blocks, for --pass training.
std::vector<RankAttentionTimes> attention_times(const PlanCpOptions& o,
                                                const std::vector<const Rows*>& rows,
                                                const std::vector<CpPlan>& plans) {
  std::vector<RankAttentionTimes> times;
  if (o.gpu.empty()) return times;
  if (o.shape.heads % o.shape.kv_heads != 0)
    throw InputError("--kv-heads: must divide --heads (" + std::to_string(o.shape.heads) + ")");
  GpuSpec gpu;
  try {
    gpu = gpu_preset(o.gpu);
  } catch (const InputError& e) {
    throw InputError(std::string("--gpu: ") + e.what());
  }
  const bool training = o.pass == "training";
  IntraGpuOptions options =
      intra_gpu_options(gpu, o.shape, o.request.sizes, o.kernel_efficiency, training);
  options.thread_block_time_s = o.thread_block_us * 1e-6;
  options.blocks_per_cu = o.blocks_per_cu;
  if (o.sub_block_size > 0) {
    try {
      options.sub_block = sub_block_of(o.sub_block_size, o.request.sizes);
    } catch (const InputError& e) {
      throw InputError(std::string("--sub-block-size: ") + e.what() +
                       " (--query-block, --key-block); or give --sub-blocks");
    }
  } else {
    options.sub_blocks_per_row = o.sub_blocks;
  }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (!training) {
      times.push_back(rank_attention_times_s(plans[i], options));
      continue;
    }
    const PerCpRank<std::vector<std::int64_t>> loads = key_block_loads(plans[i], *rows[i]);
    times.push_back(rank_attention_times_s(plans[i], options, &loads));
  }
  return times;
}

/// A plan's JSON; a token-dealt plan's blocks are its ranks' own, so it carries their
/// workloads (the top-level block_workload is the mask's).
nlohmann::json plan_json(const CpPlan& plan) {
  nlohmann::json fractions = nlohmann::json::array();
  for (int r = 0; r < plan.cp; ++r) fractions.push_back(plan.time_fraction(r));
  nlohmann::json out = {{"distribution", to_string(plan.distribution)},
                        {"makespan", plan.makespan},
                        {"lower_bound", plan.lower_bound},
                        {"optimal", plan.optimal},
                        {"imbalance", plan.imbalance()},
                        {"rank_workload", plan.rank_workload},
                        {"rank_tokens", plan.rank_tokens},
                        {"time_fraction", fractions},
                        {"owner", plan.owner}};
  if (plan.distribution == CpDistribution::kRandomTokens)
    out["block_workload"] = plan.block_workload;
  return out;
}

void print_text(const PlanCpOptions& o, const std::vector<CpPlan>& plans) {
  const CpPlan& first = plans.front();
  std::printf("mask %s, %lld tokens, cp %d: %zu query blocks of %lld tokens, key blocks of %lld\n",
              o.mask.c_str(), static_cast<long long>(o.spec.seq), first.cp,
              first.block_workload.size(), static_cast<long long>(first.sizes.query_block),
              static_cast<long long>(first.sizes.key_block));
  std::printf("work %lld key blocks; lower bound on the makespan %lld\n\n",
              static_cast<long long>(first.total_workload),
              static_cast<long long>(first.lower_bound));
  std::printf("%-6s", "rank");
  for (const CpPlan& p : plans)
    std::printf("  %13s %8s %5s", to_string(p.distribution), "tokens", "frac");
  std::printf("\n");
  for (size_t r = 0; r < first.rank_workload.size(); ++r) {  // one per CP rank
    std::printf("%-6zu", r);
    for (const CpPlan& p : plans)
      std::printf("  %13lld %8lld %5.3f", static_cast<long long>(p.rank_workload[r]),
                  static_cast<long long>(p.rank_tokens[r]), p.time_fraction(static_cast<int>(r)));
    std::printf("\n");
  }
  std::printf("\n%-14s %12s %10s %10s %s\n", "distribution", "makespan", "imbalance", "vs-bound",
              "optimal");
  for (const CpPlan& p : plans) {
    std::printf("%-14s %12lld %10.4f %10.4f %s\n", to_string(p.distribution),
                static_cast<long long>(p.makespan), p.imbalance(),
                p.lower_bound > 0
                    ? static_cast<double>(p.makespan) / static_cast<double>(p.lower_bound)
                    : 1.0,
                p.optimal ? "proven" : "-");
  }
}

void print_attention(const PlanCpOptions& o, const std::vector<CpPlan>& plans,
                     const std::vector<RankAttentionTimes>& times) {
  std::printf(
      "\nattention, one layer on %s (%s; %d heads, %d KV heads, head dim %d, %s, kernel at %.3g "
      "of peak, %.3g us per thread block), ms\n%-6s",
      o.gpu.c_str(), o.pass == "training" ? "forward + backward" : "forward", o.shape.heads,
      o.shape.kv_heads, o.shape.head_dim, split_name(o).c_str(), o.kernel_efficiency,
      o.thread_block_us, "rank");
  for (const CpPlan& p : plans) std::printf(" %13s", to_string(p.distribution));
  std::vector<std::vector<double>> totals;
  for (const RankAttentionTimes& t : times) totals.push_back(t.total_s());
  for (size_t r = 0; r < totals.front().size(); ++r) {  // one per CP rank
    std::printf("\n%-6zu", r);
    for (const auto& t : totals) std::printf(" %13.3f", 1e3 * t[r]);
  }
  std::printf("\n%-6s", "group");
  for (const RankAttentionTimes& t : times) std::printf(" %13.3f", 1e3 * t.group_s());
  std::printf("\n%s", o.pass == "training"
                          ? "(group: the ranks wait for each other at every backward kernel's "
                            "dK/dV reduce-scatter)\n"
                          : "");
}

/// A mask file: one word per token per line (decimal or 0x-hex), '#' comments.
AttentionMask read_mask_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("--mask-file: cannot open '" + path + "'");
  AttentionMask mask;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const auto last = line.find_last_not_of(" \t\r");
    const std::string text = line.substr(first, last - first + 1);
    std::uint64_t word = 0;
    const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
    const char* begin = text.data() + (hex ? 2 : 0);
    const auto [end, error] =
        std::from_chars(begin, text.data() + text.size(), word, hex ? 16 : 10);
    if (error != std::errc() || end != text.data() + text.size())
      throw InputError(path + ":" + std::to_string(number) + ": '" + text +
                       "' is not a 64-bit word (decimal or 0x-hex)");
    mask.words.push_back(word);
  }
  if (mask.words.empty()) throw InputError(path + ": no tokens");
  return mask;
}

/// Token letters: t text (causal), s sink, A.. the lowest encoder bit of a non-causal token.
char token_letter(std::uint64_t word) {
  if (word & kSinkBit) return 's';
  if (word & kCausalBit) return 't';
  const std::uint64_t bits = word & kModalityBits;
  if (bits == 0) return '_';
  int lowest = 0;
  while (((bits >> lowest) & 1) == 0) ++lowest;
  return static_cast<char>('A' + (lowest + 25) % 26);
}

void print_picture(const AttentionMask& mask) {
  if (mask.size() > 256) throw InputError("--picture: --seq must be <= 256 tokens");
  std::string header(2, ' ');
  for (const std::uint64_t word : mask.words) header += token_letter(word);
  std::printf("%s\n", header.c_str());
  for (std::int64_t q = 0; const std::uint64_t word : mask.words) {
    std::string row{token_letter(word), ' '};
    for (std::int64_t k = 0; k < mask.size(); ++k) row += mask.attends(q, k) ? '#' : '.';
    std::printf("%s\n", row.c_str());
    ++q;
  }
}

int run_plan_cp(PlanCpOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  o.spec.kind = parse_mask_kind(o.mask);
  const AttentionMask mask =
      o.mask_file.empty() ? generate_mask(o.spec) : read_mask_file(o.mask_file);
  if (!o.mask_file.empty()) {
    o.mask = o.mask_file;
    o.spec.seq = mask.size();
  }
  if (o.picture) {
    print_picture(mask);
    return 0;
  }
  std::vector<CpDistribution> wanted;
  if (o.distribution == "all")
    wanted.assign(std::begin(kCpDistributions), std::end(kCpDistributions));
  else
    wanted = {parse_cp_distribution(o.distribution)};
  // A training step's backward needs each row's key blocks, whose counts are the workloads;
  // only the plans that deal the mask's own query blocks use them (random-tokens has its own).
  const bool training = !o.gpu.empty() && o.pass == "training";
  const bool block_dealt = std::ranges::any_of(
      wanted, [](CpDistribution d) { return d != CpDistribution::kRandomTokens; });
  Rows rows;
  std::vector<std::int64_t> workloads;
  if (training && block_dealt) {
    rows = visible_key_blocks(mask, o.request.sizes);
    for (const auto& runs : rows) {
      std::int64_t w = 0;
      for (const KeyBlockRun& run : runs) w += run.last - run.first + 1;
      workloads.push_back(w);
    }
  } else {
    workloads = block_workloads(mask, o.request.sizes);
  }
  std::vector<CpPlan> plans;
  std::vector<Rows> token_rows;  // a token-dealt plan's own; reserved: plan_rows points in
  token_rows.reserve(wanted.size());
  std::vector<const Rows*> plan_rows;
  for (CpDistribution d : wanted) {
    if (d == CpDistribution::kIlp)
      std::cerr << "loom: solving the ILP (GLPK, time limit " << o.request.ilp.time_limit_s
                << " s)\n";
    CpPlanRequest request = o.request;
    request.distribution = d;
    if (d == CpDistribution::kRandomTokens) {
      TokenDealtPlan dealt = plan_cp_random_tokens(mask, request);
      plans.push_back(std::move(dealt.plan));
      plan_rows.push_back(&token_rows.emplace_back(std::move(dealt.rows)));
      continue;
    }
    plans.push_back(plan_cp_from_workloads(workloads, mask.size(), request));
    plan_rows.push_back(&rows);
  }
  const std::vector<RankAttentionTimes> times = attention_times(o, plan_rows, plans);
  const double elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (o.json) {
    nlohmann::json out = {{"mask", o.mask_file.empty() ? o.mask : o.mask_file},
                          {"seq", o.spec.seq},
                          {"cp", o.request.cp},
                          {"query_block", o.request.sizes.query_block},
                          {"key_block", o.request.sizes.key_block},
                          {"total_workload", plans.front().total_workload},
                          {"block_workload", workloads},
                          {"plans", nlohmann::json::array()}};
    if (!times.empty()) {
      out["intra_gpu_split"] = split_name(o);
      out["kernel_efficiency"] = o.kernel_efficiency;
      out["thread_block_us"] = o.thread_block_us;
      out["blocks_per_cu"] = o.blocks_per_cu;
      out["pass"] = o.pass;
    }
    for (std::size_t i = 0; i < plans.size(); ++i) {
      out["plans"].push_back(plan_json(plans[i]));
      if (times.empty()) continue;
      nlohmann::json& plan = out["plans"].back();
      plan["rank_attention_s"] = times[i].total_s();
      plan["rank_forward_s"] = times[i].forward_s;
      plan["rank_backward_s"] = times[i].backward_s;
      plan["attention_s"] = times[i].group_s();
    }
    std::cout << out.dump() << "\n";
  } else {
    print_text(o, plans);
    if (!times.empty()) print_attention(o, plans, times);
  }
  std::cerr << "loom: planned in " << elapsed_ms << " ms\n";
  return 0;
}

}  // namespace

CommandRun attach_plan_cp(CLI::App& sub) {
  auto o = std::make_shared<PlanCpOptions>();
  o->request.cp = 8;  // the evaluation's CP degree (§3.5.4, arXiv §6.4)
  sub.description(
      "Distribute the query blocks of one attention mask over a context-parallel group.\n"
      "Workload of a query block = key blocks not fully masked (dissertation Alg 1); the\n"
      "makespan is the largest per-GPU workload. Masks are generated from --mask and its\n"
      "parameters (see docs/context-parallelism.md for pictures and the bitfield predicate).\n"
      "Example: loom plan cp --mask packed --seq 65536 --cp 8 --distribution all");
  add_mask_options(sub, *o);
  add_plan_options(sub, *o);
  return [o]() { return run_plan_cp(*o); };
}

}  // namespace loom
