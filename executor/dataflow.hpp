#pragma once
/// What each operation of a schedule reads and writes, derived from the IR and the model
/// DAG alone, so every backend moves the same tensors (executor/backend.hpp, "Data flow").
///
/// The layer graph follows the model's module DAG: inside a module layer l feeds l+1; a
/// module's first layer is fed by the last layer of each of its input modules (in global
/// order). A layer with no consumer is a loss layer (the LLM's last layer).
#include <map>
#include <vector>

#include "core/model.hpp"
#include "core/schedule.hpp"
#include "executor/backend.hpp"

namespace loom::exec {

class LayerGraph {
 public:
  explicit LayerGraph(const Model& model);
  const std::vector<int>& producers(int layer) const {
    return producers_.at(static_cast<size_t>(layer));
  }
  const std::vector<int>& consumers(int layer) const {
    return consumers_.at(static_cast<size_t>(layer));
  }
  bool is_loss_layer(int layer) const { return consumers(layer).empty(); }
  const Model& model() const { return *model_; }

 private:
  const Model* model_;
  std::vector<std::vector<int>> producers_, consumers_;
};

/// F edges a forward on [first_layer, end_layer) reads (empty for an encoder's first
/// layer: it reads the sample's synthetic input).
std::vector<EdgeKey> forward_inputs(const LayerGraph& graph, const Compute& op);
/// F edges it writes (none out of a loss layer).
std::vector<EdgeKey> forward_outputs(const LayerGraph& graph, const Compute& op);
/// B edges a backward (B or I) reads: gradients from the consumers of the last layer,
/// summed (none at a loss layer: the loss supplies the gradient). Empty when the last
/// layer needs no backward (nothing trainable upstream).
std::vector<EdgeKey> backward_inputs(const LayerGraph& graph, const Compute& op);
/// B edges a backward writes: gradients for producers that have something trainable
/// upstream (the others need none, dissertation Eq 3.3).
std::vector<EdgeKey> backward_outputs(const LayerGraph& graph, const Compute& op);

/// Which layers' gradients each all-reduce of a rank sums: the trainable layers of the
/// op's module this rank computes (its non-redundant forwards); trainable layers of a
/// module without an all-reduce of its own on this rank join the rank's last all-reduce
/// (a stage that spans projector and LLM reduces both in one bucket). Keyed by op index.
std::map<int, std::vector<int>> allreduce_layers(const Schedule& schedule, const Model& model,
                                                 int rank);

/// Whether a compute is a redundant forward-only copy (issue 3's Compute::redundant, when
/// the IR has it): it costs time but its output feeds nothing and it trains nothing.
template <class C>
bool is_redundant(const C& op) {
  if constexpr (requires { op.redundant; }) {
    return op.redundant;
  } else {
    return false;
  }
}

/// The layers a rank holds parameters for: those of its non-redundant forward computes.
std::vector<int> rank_layers(const Schedule& schedule, int rank);

}  // namespace loom::exec
