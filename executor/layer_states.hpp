#pragma once
/// What a layer's forward leaves for its backward-input (I), and I for its backward-weight
/// (W), per (microbatch, layer) on one rank: the bookkeeping the host and the CUDA model
/// states share, whatever their tensors. `State` has `grads` (filled by I, read by W).
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/schedule.hpp"

namespace loom::exec {

template <class State>
class LayerStates {
 public:
  void put(MicrobatchId microbatch, int layer, State state) {
    states_[{microbatch, layer}] = std::move(state);
  }

  /// The state the layer's forward left. Throws std::logic_error when there is none (I
  /// scheduled before its F).
  State& of_forward(MicrobatchId microbatch, int layer) {
    auto it = states_.find({microbatch, layer});
    if (it == states_.end())
      throw std::logic_error("backward of layer " + std::to_string(layer) + " microbatch " +
                             to_string(microbatch) + " before its forward");
    return it->second;
  }

  void erase(MicrobatchId microbatch, int layer) { states_.erase({microbatch, layer}); }

  /// W of `op`: `weight(layer, state)` for each of its layers that left a state (frozen
  /// layers and those with nothing trainable upstream leave none), which is then dropped.
  /// Throws std::logic_error when I has not filled a state's gradients (W before its I).
  template <class Weight>
  void backward_weight(const Compute& op, Weight&& weight) {
    for (int l = op.first_layer; l < op.end_layer; ++l) {
      auto it = states_.find({op.microbatch, l});
      if (it == states_.end()) continue;
      if (it->second.grads.empty())
        throw std::logic_error("W of layer " + std::to_string(l) + " microbatch " +
                               to_string(op.microbatch) + " before its I");
      weight(l, it->second);
      states_.erase(it);
    }
  }

 private:
  std::map<std::pair<MicrobatchId, int>, State> states_;
};

}  // namespace loom::exec
