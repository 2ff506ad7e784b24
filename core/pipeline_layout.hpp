#pragma once
/// Megatron-Core's pipeline layout string (`--pipeline-model-parallel-layout`,
/// PipelineParallelLayerLayout): the layers of every (virtual) pipeline stage, in virtual
/// stage order (stage i is chunk i / pp on rank i mod pp). `E` the embedding, `t` a
/// transformer layer, `m` a multi-token-prediction layer (the module's `mtp_layers`, last
/// stage only), `L` the LM head and loss, `|` a stage boundary, `X*n` n times X,
/// `(...)*n` a group n times (it may hold boundaries); commas and spaces are separators
/// only. Llama 3.1 405B as Megatron-Bridge splits it over 8 x 8 stages, the embedding and
/// the loss counted as a layer each: "Et|(tt|)*62tL".
#include <string>
#include <vector>

namespace loom {

struct LayoutStage {
  bool embedding = false;
  int transformer_layers = 0;  ///< the `m` layers included
  int mtp_layers = 0;
  bool loss = false;
};

/// Parses `text`. Throws InputError "schedule.layout: ..." naming the column of the first
/// character that does not fit (an unknown symbol, an unclosed group, a repetition without
/// a count).
std::vector<LayoutStage> parse_pipeline_layout(const std::string& text);

/// Transformer layers per stage of a layout for a model of `layers` layers whose embedding
/// runs with its first layer and whose loss runs with its last (how Loom's model holds
/// them): checks that the layout counts `layers` transformer layers, one E in the first
/// stage and one L in the last (or none of either), `m` only in the last stage, and that
/// every stage holds a transformer layer. Throws InputError naming schedule.layout and what it
/// counted.
/// `mtp_layers`: the model's multi-token-prediction layers, as many `m` as it has.
std::vector<int> layout_stage_layers(const std::vector<LayoutStage>& stages, int layers,
                                     int mtp_layers = 0);

/// The layout back in canonical form: stages joined by '|', runs of t as "t*n".
std::string format_pipeline_layout(const std::vector<LayoutStage>& stages);

}  // namespace loom
