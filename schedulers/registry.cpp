#include "core/errors.hpp"
#include "core/spelling.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {

Schedule generate_gpipe(const SchedulingProblem& problem);
Schedule generate_1f1b(const SchedulingProblem& problem);
Schedule generate_zb_h1(const SchedulingProblem& problem);
Schedule generate_zb_h2(const SchedulingProblem& problem);
Schedule generate_interleaved_1f1b(const SchedulingProblem& problem);
Schedule generate_zb_v(const SchedulingProblem& problem);
Schedule generate_looped_bfs(const SchedulingProblem& problem);
Schedule generate_dualpipe_v(const SchedulingProblem& problem);
Schedule generate_chimera(const SchedulingProblem& problem);
Schedule generate_interleaved_zb(const SchedulingProblem& problem);
Schedule generate_encoders_replicated(const SchedulingProblem& problem);
Schedule generate_encoders_colocated(const SchedulingProblem& problem);
Schedule generate_cornstarch(const SchedulingProblem& problem);
Schedule generate_hetero_colocated(const SchedulingProblem& problem);
Schedule generate_hetero_noncolocated(const SchedulingProblem& problem);
Schedule generate_disttrain(const SchedulingProblem& problem);
Schedule generate_dip(const SchedulingProblem& problem);
Schedule generate_omnibal(const SchedulingProblem& problem);
Schedule generate_entrain(const SchedulingProblem& problem);
Schedule generate_bamboo(const SchedulingProblem& problem);

std::vector<OptionSpec> one_f_one_b_options();
std::vector<OptionSpec> interleaved_1f1b_options();
std::vector<OptionSpec> looped_bfs_options();
std::vector<OptionSpec> interleaved_zb_options();
std::vector<OptionSpec> encoders_colocated_options();
std::vector<OptionSpec> cornstarch_options();
std::vector<OptionSpec> hetero_colocated_options();
std::vector<OptionSpec> dip_scheduler_options();
std::vector<OptionSpec> disttrain_scheduler_options();
std::vector<OptionSpec> omnibal_options();
std::vector<OptionSpec> entrain_scheduler_options();
std::vector<OptionSpec> bamboo_options();

const std::vector<SchedulerInfo>& scheduler_registry() {
  static const std::vector<SchedulerInfo> kSchedulers = {
      {"gpipe", "GPipe: all forwards, then all backwards (peak activations: m microbatches)",
       generate_gpipe},
      {"1f1b", "1F1B: stage s warms up with p-s-1 forwards, then one forward, one backward",
       generate_1f1b, one_f_one_b_options},
      {"zb-h1",
       "ZB-H1 (zero-bubble PP §2.2): split backward I/W, 1F1B warm-up, stage s defers s W "
       "into the cool-down; bubble (p-1)(T_F+T_B-T_W), peak p microbatches",
       generate_zb_h1},
      {"zb-h2",
       "ZB-H2 (zero-bubble PP §2.2): 2(p-s)-1 warm-up F, W deferred to fill the tail; "
       "bubble (p-1)(T_F+T_B-2T_W) within each stage's span, peak 2p-1 microbatches",
       generate_zb_h2},
      {"interleaved-1f1b",
       "Megatron interleaved 1F1B: chunks = v virtual stages per rank (chunk c of "
       "rank r = stage c*p+r), microbatches in groups of microbatch_group_size N "
       "(default pp; last group 0 or >= pp); bubble/ideal (p-1)/(v m)",
       generate_interleaved_1f1b, interleaved_1f1b_options},
      {"zb-v",
       "ZB-V (zero-bubble PP arXiv 2401.10241 §6; PyTorch ScheduleZBVZeroBubble): 2p stages "
       "in a V (rank r holds r and 2p-1-r), split backward I/W; peak = 1F1B's rank 0, zero "
       "bubble within each rank's span for T_F = T_I = T_W",
       generate_zb_v},
      {"dualpipe-v",
       "DualPipeV (DeepSeek-V3 §3.2.1; PyTorch ScheduleDualPipeV): ZB-V's V placement, "
       "overlapped forward+backward pairs (F+B) in the steady state, split I/W in warm-up and "
       "cool-down; m >= 2p",
       generate_dualpipe_v},
      {"chimera",
       "Chimera (Li and Hoefler SC'21): two pipelines of the same p stages in opposite "
       "directions (rank r holds stage r and p-1-r), m/2 microbatches each, gradients of the "
       "two copies all-reduced; p even, m a multiple of p; bubble (p-2)/(2m+p-2) for T_F = T_B",
       generate_chimera},
      {"bamboo",
       "Bamboo (NSDI'23): 1F1B where every stage also runs its successor's forward on its own "
       "output (redundant computation) and holds its model state (2x memory); >= 2 stages",
       generate_bamboo, bamboo_options},
      {"looped-bfs",
       "breadth-first looped PP (Lamy-Poirier MLSys'23; PyTorch ScheduleLoopedBFS): "
       "chunks = v stages per rank (stage s on rank s mod p), all F chunk by chunk, "
       "then all B in reverse; bubble/ideal (p-1)/(v m) for m >= p, peak v m chunk-microbatches",
       generate_looped_bfs, looped_bfs_options},
      {"interleaved-zb",
       "interleaved zero bubble (PyTorch ScheduleInterleavedZeroBubble, ZB1P of zero-bubble "
       "PP): chunks = v looped stages per rank, split backward I/W, warm-up "
       "(v-1)R+p-1-r, rank r defers r W into the cool-down (v = 1 is zb-h1)",
       generate_interleaved_zb, interleaved_zb_options},
      {"encoders-replicated",
       "Meta-Llama MLLM PP (cornstarch §2.2): LLM in pp stages, every encoder run on every "
       "stage (copies forward-only: reconstructed)",
       generate_encoders_replicated},
      {"encoders-colocated",
       "Megatron MLLM PP (cornstarch §2.2): encoders cut into E stages, fused and run "
       "sequentially, then the LLM; E balances Eq 3.5's bottleneck (reconstructed, E >= 1) "
       "or its encoder_stages option (0: encoders on the LLM's first stage, LLaVA's layout)",
       generate_encoders_colocated, encoders_colocated_options},
      {"cornstarch",
       "Cornstarch: modality parallelism (encoders on own stages, concurrent), Eq 3.5 "
       "partitions, stage allocation by Algorithm 1 (evaluator as iteration time: "
       "reconstructed); modality_parallelism = auto also tries the encoders colocated "
       "(fused on stages of their own, and on the LLM's first stage) and runs the faster",
       generate_cornstarch, cornstarch_options},
      {"hetero-colocated",
       "heterogeneous parallelism §3.3: per-module grids on one rank set, three phases "
       "(encoder F, LLM 1F1B, encoder B), local all-gather boundary, CP split by the CP "
       "planner (encoder items as every scheduler sees them: the workload's, else item_tokens, "
       "default 1,024: reconstructed)",
       generate_hetero_colocated, hetero_colocated_options},
      {"hetero-noncolocated",
       "heterogeneous parallelism §3.3: per-module grids on disjoint rank sets, graph-aware "
       "1F1B (warmup = stages to the sink), boundary leaders + local TP broadcast",
       generate_hetero_noncolocated},
      {"disttrain",
       "DistTrain-like (dissertation Fig 4.2b): encoders and LLM on disjoint stages, 1F1B, "
       "planned on one sample; LPT intra- and smallest-first/best-fit inter-microbatch "
       "reordering (reconstructed from secondhand descriptions); encoder_stages = 0 puts "
       "the encoders on the LLM's first stage",
       generate_disttrain, disttrain_scheduler_options},
      {"dip",
       "DIP-like (Fig 4.2c): modalities partitioned separately into K_i chunks per rank, "
       "colocated; MCTS over segment order + greedy dual-queue interleaving under a memory "
       "cap (alpha/beta, budget, sub-microbatch = microbatch: reconstructed)",
       generate_dip, dip_scheduler_options},
      {"omnibal",
       "OmniBal: ISF balanced mini-batches (Alg 1-2), BMP partition search (Eq 4-5), "
       "adaptive per-stage recompute (Q, r, K, normalization, recompute rule: "
       "reconstructed)",
       generate_omnibal, omnibal_options},
      {"entrain",
       "Entrain (dissertation §4.5): E encoder + L LLM stages; Alg 4 DP-level + stratified "
       "assignment (K_eff), pairwise deferral (subset-sum DP, Eq 4.3 bottleneck matching), "
       "split backward, eager forward; pipeline = 1f1b | zb (S_c/S_f split at the "
       "median, E by balance: reconstructed)",
       generate_entrain, entrain_scheduler_options},
  };
  return kSchedulers;
}

const SchedulerInfo& find_scheduler(const std::string& name) {
  for (const SchedulerInfo& info : scheduler_registry()) {
    if (name == info.name) return info;
  }
  std::string valid;
  std::vector<std::string> names;
  for (const SchedulerInfo& info : scheduler_registry()) {
    valid += (valid.empty() ? "" : ", ") + std::string(info.name);
    names.emplace_back(info.name);
  }
  throw InputError("schedule.name: unknown scheduler '" + name + "'" + did_you_mean(name, names) +
                   " (valid: " + valid + ")");
}

}  // namespace loom
