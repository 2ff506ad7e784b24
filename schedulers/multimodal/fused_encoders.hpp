#pragma once
/// The fused-encoder stage graph shared by encoders-colocated (cornstarch-arxiv §2.2,
/// Fig 1c) and Entrain's unified encoder (dissertation §4.5): every encoder branch cut into
/// the same E pieces, stage k < E running piece k of each branch one after the other, then
/// the LLM part in the other p - E stages; each branch cut by Eq 3.5.
///
///   stage 0:  vision[0..a) audio[0..c)          (sequential on one rank)
///   stage 1:  vision[a..) vproj audio[c..) aproj
///   stage 2+: llm pieces
#include <optional>
#include <string>
#include <vector>

#include "schedulers/multimodal/multimodal.hpp"

namespace loom {

/// The graph above for `p` stages, `e` of them encoder stages (0 <= e < p). With e = 0
/// every branch runs whole on stage 0, ahead of the LLM's first piece, and the LLM is cut
/// into p pieces with the encoders' cost counted in the first (Megatron-Core's
/// encoder_pipeline_model_parallel_size = 0, the LLaVA layout). A branch with fewer layers
/// than `e` throws InputError naming `encoder_stages_key` and the encoder.
StageGraph fused_encoder_graph(const Model& model, const Branches& branches,
                               const std::vector<double>& costs, int p, int e,
                               const std::string& encoder_stages_key);

/// Eq 3.5's objective over the fused chain: the E in 1..p-1 whose slowest stage, encoder
/// or LLM, is fastest under `costs` (ties: fewer encoder stages); nullopt when no E leaves
/// every branch and the LLM at least one layer per stage. E = 0 is not a candidate: the
/// schedulers built on this rule give the encoders stages of their own (cornstarch-arxiv
/// Fig 1c; dissertation Table 4.1's E.PP) unless the user asks for 0.
std::optional<int> balanced_encoder_stages(const Model& model, const Branches& branches,
                                           const std::vector<double>& costs, int p);

}  // namespace loom
