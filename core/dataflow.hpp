#pragma once
/// The one dependency oracle (STYLE.md point 8): which data a compute operation reads
/// and writes, derived from the model's layer DAG alone. The lowering asks it where to
/// put sends and receives, the validator which producer an op is missing, the executor
/// which tensors to move; none of them writes the rule again.
///
/// The layer graph follows the model's module DAG: inside a module layer l feeds l+1; a
/// module's first layer is fed by the last layer of each of its input modules (in global
/// order). A layer with no consumer is a loss layer (the LLM's last layer).
///
/// What a compute on layers [a, b) of microbatch j needs and gives (dissertation Eq 3.2,
/// 3.3: a layer with nothing trainable upstream needs no backward):
///   F      reads the F edges into a          writes the F edges out of b-1
///   B / I  reads the B edges out of b-1      writes the B edges into a, for producers
///          (when b-1 needs a backward)       that need a backward
///   W      reads the I of its own layers (same rank); no edges
#include <vector>

#include "core/model.hpp"
#include "core/schedule.hpp"

namespace loom {

/// The tensor between two ops: output of `producer` consumed by `boundary` (global layer
/// indices) of one microbatch; kF activations, kB the gradient along the same edge.
struct DataEdge {
  Pass pass = Pass::kF;
  MicrobatchId microbatch{0};
  int producer = 0;
  int boundary = 0;
  auto operator<=>(const DataEdge&) const = default;
};

/// The edge a Send/Recv carries.
inline DataEdge edge_of(const MessageTag& tag) {
  return {tag.pass, tag.microbatch, tag.producer(), tag.boundary_layer};
}

/// Which layers backpropagate: the frozen-aware rule of Eq 3.3, or what a frozen-unaware
/// planner believes (every layer, dissertation §3.3.1's naive view).
enum class BackwardRule { kFrozenAware, kEveryLayer };

/// Producers and consumers of every layer along the model DAG, computed once.
class LayerGraph {
 public:
  explicit LayerGraph(const Model& model, BackwardRule rule = BackwardRule::kFrozenAware);
  const std::vector<int>& producers(int layer) const { return producers_.at(LayerId{layer}); }
  const std::vector<int>& consumers(int layer) const { return consumers_.at(LayerId{layer}); }
  bool is_loss_layer(int layer) const { return consumers(layer).empty(); }
  /// p(L) of Eq 3.3: the layer backpropagates (something trainable is upstream of it).
  bool needs_backward(int layer) const {
    return every_layer_ || model_->has_trainable_upstream(layer);
  }
  const Model& model() const { return *model_; }

 private:
  const Model* model_;
  bool every_layer_ = false;
  PerLayer<std::vector<int>> producers_, consumers_;
};

/// F edges a forward on [first_layer, end_layer) reads (empty for an encoder's first
/// layer: it reads the sample's input).
std::vector<DataEdge> forward_inputs(const LayerGraph& graph, const Compute& op);
/// F edges it writes (none out of a loss layer).
std::vector<DataEdge> forward_outputs(const LayerGraph& graph, const Compute& op);
/// B edges a backward (B or I) reads: gradients from the consumers of the last layer
/// (none at a loss layer: the loss supplies the gradient). Empty when the last layer
/// needs no backward.
std::vector<DataEdge> backward_inputs(const LayerGraph& graph, const Compute& op);
/// B edges a backward (B or I) writes: gradients for producers that need a backward (the
/// others need none, Eq 3.3).
std::vector<DataEdge> backward_outputs(const LayerGraph& graph, const Compute& op);
/// The edges `op` reads from other ops (by pass: F forward_inputs, B/I backward_inputs,
/// W none) and writes for other ops (F forward_outputs, B/I backward_outputs, W none).
std::vector<DataEdge> op_inputs(const LayerGraph& graph, const Compute& op);
std::vector<DataEdge> op_outputs(const LayerGraph& graph, const Compute& op);

}  // namespace loom
