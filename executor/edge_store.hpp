#pragma once
/// The tensors waiting on one rank's edges (executor/backend.hpp, "Data flow"): a
/// compute's outputs until a Send or the consuming compute takes them, a Recv's payload
/// until its consumer does, the loss's gradient until its layer's backward, and how a
/// module's input was packed from its producers until its backward unpacks. Shared by
/// the host and the CUDA model states, which differ only in the tensor type (`Tensor` has
/// the matrix `x`).
#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/backend.hpp"
#include "executor/dataflow.hpp"
#include "executor/sample_rows.hpp"

namespace loom::exec {

template <class Tensor>
class EdgeStore {
 public:
  /// Removes and returns the tensor on `key`. Throws std::logic_error when none waits
  /// there: the schedule's data flow and this rank's execution disagree.
  Tensor take(const EdgeKey& key) {
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      throw std::logic_error(std::string("no ") +
                             (key.pass == Pass::kF ? "activation" : "gradient") +
                             " for microbatch " + to_string(key.microbatch) + " on edge layer " +
                             std::to_string(key.producer) + " -> " + std::to_string(key.boundary) +
                             " (its producer has not run on this rank, nor was it received)");
    }
    Tensor value = std::move(it->second);
    edges_.erase(it);
    return value;
  }

  void put(const EdgeKey& key, Tensor value) { edges_[key] = std::move(value); }

  /// A forward's output on every edge out of `op`: `copy(value)` on all but the last,
  /// which takes `value` itself.
  template <class Copy>
  void put_forward_outputs(const LayerGraph& graph, const Compute& op, Tensor value, Copy&& copy) {
    const std::vector<EdgeKey> outs = forward_outputs(graph, op);
    for (size_t i = 0; i < outs.size(); ++i)
      put(outs[i], i + 1 < outs.size() ? copy(value) : std::move(value));
  }

  /// The loss's gradient of (microbatch, loss layer).
  void put_loss_gradient(MicrobatchId microbatch, int layer, Tensor value) {
    loss_[{microbatch, layer}] = std::move(value);
  }

  /// The gradient I of `op` starts from: the loss's when its last layer is a loss layer,
  /// else the sum (`add(sum, part)`) of the gradients its consumers sent back.
  template <class Add>
  auto take_output_gradient(const LayerGraph& graph, const Compute& op, Add&& add) {
    const MicrobatchId mb = op.microbatch;
    const int last = op.end_layer - 1;
    decltype(Tensor::x) g;
    if (graph.is_loss_layer(last)) {
      g = std::move(loss_.at({mb, last}).x);
      loss_.erase({mb, last});
      return g;
    }
    for (const EdgeKey& key : backward_inputs(graph, op)) {
      Tensor part = take(key);
      if (g.size() == 0)
        g = std::move(part.x);
      else
        add(g, part.x);  // a layer feeding several consumers sums their gradients
    }
    return g;
  }

  /// The rows per sample of each part a module's first layer packed its input from
  /// (pack_samples), kept for put_input_gradient.
  void put_packing(MicrobatchId microbatch, int first_layer,
                   std::vector<std::vector<int>> part_lengths) {
    packings_[{microbatch, first_layer}] = std::move(part_lengths);
  }

  /// I's input gradient `g` back along the edges `op`'s input came from (`outs`: its
  /// backward_outputs): whole on the one edge into a module's inner layer, else unpacked
  /// as the forward packed it, `unpack(g, lengths, blocks)` building one producer's part.
  template <class Unpack>
  void put_input_gradient(const Model& model, const LayerGraph& graph, const Compute& op,
                          decltype(Tensor::x) g, const std::vector<EdgeKey>& outs,
                          Unpack&& unpack) {
    const MicrobatchId mb = op.microbatch;
    const int first = op.first_layer;
    if (!is_module_first(model, first)) {
      put(outs.front(), {std::move(g), {}});
      return;
    }
    const std::vector<std::vector<int>> pieces = std::move(packings_.at({mb, first}));
    packings_.erase({mb, first});
    const auto& producers = graph.producers(first);
    for (int k = 0; k < static_cast<int>(producers.size()); ++k) {
      const EdgeKey key{Pass::kB, mb, producers[static_cast<size_t>(k)], first};
      if (std::find(outs.begin(), outs.end(), key) == outs.end()) continue;
      put(key, unpack(g, pieces[static_cast<size_t>(k)], unpack_part(pieces, k)));
    }
  }

 private:
  std::map<EdgeKey, Tensor> edges_;
  std::map<std::pair<MicrobatchId, int>, Tensor> loss_;  ///< (microbatch, loss layer)
  /// (microbatch, module's first layer) -> per part, rows per sample
  std::map<std::pair<MicrobatchId, int>, std::vector<std::vector<int>>> packings_;
};

}  // namespace loom::exec
