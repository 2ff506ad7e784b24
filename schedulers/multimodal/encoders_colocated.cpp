// Encoders-colocated pipeline parallelism (Megatron-LM's VLM pipeline; cornstarch-arxiv
// §2.2, Fig 1c and 2b; the "encoders being colocated" rows of dissertation Table 3.2):
// every encoder branch is cut into the same number E of stages and stage k runs piece k of
// every encoder one after the other, fused into one chain ahead of the LLM's p - E stages.
// The chain is what creates the false dependency: the audio piece waits for the vision
// piece on the same GPU although the two encoders are independent.
//
//   stage 0:  vision[0..a) audio[0..c)          (sequential on one rank)
//   stage 1:  vision[a..) vproj audio[c..) aproj
//   stage 2+: llm pieces
//
// Each branch and the LLM are partitioned by Eq 3.5 with the configured cost view
// (`naive` = Megatron's "backward = 2 x forward", `true` = frozen-aware). E is
// `[schedule.encoders-colocated] encoder_stages`, or ("auto", the default) the E in 1..p-1
// that minimizes the slowest stage over the whole fused chain, Eq 3.5's objective
// (reconstructed: the paper does not say how E was picked; this is the balance the
// dissertation's partitioner aims for, §3.4.1, and under `naive` it balances forward time,
// §3.5.3). "auto" never picks 0: the baseline gives the encoders stages of their own.
// E = 0 is Megatron-Core's LLaVA layout (encoder_pipeline_model_parallel_size = 0, the
// encoder on the LLM's first pipeline stage; megatron/core/models/multimodal/llava_model.py):
//
//   stage 0:  vision audio llm[0..a)           (encoders whole, then the LLM's first piece)
//   stage 1+: llm pieces, the LLM cut into pp pieces with the encoders counted in the first
#include "core/errors.hpp"
#include "schedulers/multimodal/fused_encoders.hpp"

namespace loom {

StageGraph encoders_colocated_graph(const SchedulingProblem& problem, const Branches& branches,
                                    const std::vector<double>& costs, const char* scheduler_name,
                                    std::optional<int> encoder_stages) {
  const int p = problem.parallel.pp;
  const std::string key = "schedule." + std::string(scheduler_name) + ".encoder_stages";
  if (encoder_stages && *encoder_stages >= p)
    throw InputError(key + ": " + std::to_string(*encoder_stages) +
                     " leaves no stage for the LLM (parallel.pp = " + std::to_string(p) +
                     "); 0 puts the encoders on the LLM's first stage");
  if (!encoder_stages) {
    if (p < 2)
      throw InputError(std::string("parallel.pp: '") + scheduler_name +
                       "' gives the encoders stages of their own and needs at least 2; set " + key +
                       " = 0 to run them on the LLM's first stage");
    encoder_stages = balanced_encoder_stages(*problem.model, branches, costs, p);
    if (!encoder_stages)
      throw InputError("parallel.pp: " + std::to_string(p) +
                       " stages cannot hold the encoders and the LLM (too few layers); set " + key +
                       " = 0 to run the encoders on the LLM's first stage");
  }
  return fused_encoder_graph(*problem.model, branches, costs, p, *encoder_stages, key);
}

std::string encoder_stages_help(const std::string& stages, const std::string& rule) {
  return stages +
         ", E in 0..pp-1: 0 runs the encoders on the LLM's first stage (Megatron-Core's "
         "encoder_pipeline_model_parallel_size = 0, LLaVA's layout); \"auto\" = " +
         rule;
}

const OptionSet<EncoderStagesOptions>& encoder_stages_options() {
  static const std::string help =
      encoder_stages_help("pipeline stages of the fused encoders",
                          "the E >= 1 whose slowest stage is fastest (Eq 3.5's balance)");
  static const OptionSet<EncoderStagesOptions> kOptions{
      {"encoder_stages", &EncoderStagesOptions::encoder_stages, help.c_str(), at_least(0)},
  };
  return kOptions;
}

std::vector<OptionSpec> encoders_colocated_options() {
  return encoder_stages_options().specs();
}

Schedule generate_encoders_colocated(const SchedulingProblem& problem) {
  const char* name = "encoders-colocated";
  require_single_layout(problem, name);
  const Branches branches = split_branches(*problem.model, name);
  const std::vector<double> costs = view_costs(problem);
  const std::optional<int> e = encoder_stages_options().read(problem.schedule, name).encoder_stages;
  return lower_multimodal(problem, name,
                          encoders_colocated_graph(problem, branches, costs, name, e));
}

}  // namespace loom
