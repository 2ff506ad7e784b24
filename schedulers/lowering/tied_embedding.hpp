#pragma once
/// Tied embeddings under pipeline parallelism, as Megatron-LM trains GPT: a module with a
/// vocabulary has its input embedding on the stage of its first layer and its LM head,
/// which shares those weights, on the stage of its last layer. When the two stages live on
/// different ranks, the head's rank keeps a copy of the embedding (weights, gradients and
/// optimizer state), and after the backward the copies' gradients are all-reduced over the
/// ranks that hold either stage (Megatron-LM's "embedding group"), so both stay equal.
/// The lowering charges the copy's memory (pass 8), adds its gradients to the copy
/// holder's data-parallel all-reduce and its update to its optimizer step (pass 7), and
/// adds the embedding all-reduce (pass 6).
#include <algorithm>
#include <vector>

#include "schedulers/lowering/programs.hpp"
#include "schedulers/scheduler.hpp"

namespace loom::lowering {

struct TiedEmbedding {
  ModuleId module{0};
  int first_layer = 0;    ///< global index; its dtype is the embedding's
  double parameters = 0;  ///< all TP shards together
  StageId first_stage;    ///< holds the embedding (the module's first layer)
  StageId last_stage;     ///< runs the LM head (the module's last layer)
  bool trained = true;    ///< the embedding is not frozen: it has gradients to reduce
  /// Ranks of one replica that keep a copy: they hold the last stage but not the first
  /// (nor, as Bamboo's last stage does, a successor copy of it).
  std::vector<PipelineRank> copy_ranks = {};
  /// Ranks of one replica holding either stage, ascending: the embedding all-reduce's
  /// members.
  std::vector<PipelineRank> group = {};
  bool keeps_copy(PipelineRank rank) const {
    return std::find(copy_ranks.begin(), copy_ranks.end(), rank) != copy_ranks.end();
  }
};

/// Every tied embedding of the model under the programs' placement whose LM head runs on
/// a rank without the embedding's stage (none with one pipeline stage).
std::vector<TiedEmbedding> tied_embeddings(const SchedulingProblem& problem,
                                           const PipelinePrograms& programs);

}  // namespace loom::lowering
