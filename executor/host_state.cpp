#include "executor/host_state.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "executor/synthetic_data.hpp"

namespace loom::exec {
namespace {

/// Per sample, T rows -> round(T x ratio) rows, each the mean of a contiguous run of input
/// rows (or a repeat when ratio > 1): the module's token_ratio (core/workload.hpp rounds
/// the same way), e.g. 4 patches -> 1 token for a 0.25 projector.
struct Span {
  int lo, hi;
};
Span span(int i, int in, int out) {
  const int lo = static_cast<int>(long{i} * in / out);
  const int hi = std::max(lo + 1, static_cast<int>(long{i + 1} * in / out));
  return {lo, hi};
}

Activation resample_forward(const Activation& a, double ratio) {
  Activation out;
  int total = 0;
  for (int t : a.lengths) {
    out.lengths.push_back(static_cast<int>(std::round(t * ratio)));
    total += out.lengths.back();
  }
  out.x = Matrix(total, a.x.cols);
  int in_off = 0, out_off = 0;
  for (size_t s = 0; s < a.lengths.size(); ++s) {
    const int in = a.lengths[s], n = out.lengths[s];
    for (int i = 0; i < n; ++i) {
      const Span sp = span(i, in, n);
      float* o = out.x.row(out_off + i);
      for (int r = sp.lo; r < sp.hi; ++r) {
        for (int c = 0; c < a.x.cols; ++c)
          o[c] += a.x.at(in_off + r, c) / static_cast<float>(sp.hi - sp.lo);
      }
    }
    in_off += in;
    out_off += n;
  }
  return out;
}

Matrix resample_backward(const Matrix& dy, const std::vector<int>& in_lengths,
                         const std::vector<int>& out_lengths) {
  int total = 0;
  for (int t : in_lengths) total += t;
  Matrix dx(total, dy.cols);
  int in_off = 0, out_off = 0;
  for (size_t s = 0; s < in_lengths.size(); ++s) {
    const int in = in_lengths[s], n = out_lengths[s];
    for (int i = 0; i < n; ++i) {
      const Span sp = span(i, in, n);
      for (int r = sp.lo; r < sp.hi; ++r) {
        for (int c = 0; c < dy.cols; ++c)
          dx.at(in_off + r, c) += dy.at(out_off + i, c) / static_cast<float>(sp.hi - sp.lo);
      }
    }
    in_off += in;
    out_off += n;
  }
  return dx;
}

bool is_module_first(const Model& model, int layer) {
  return model.layer_ref(layer).local_index == 0;
}

bool is_module_last(const Model& model, int layer) {
  const LayerRef& ref = model.layer_ref(layer);
  return ref.local_index + 1 == isize(model.module(ref.module).layers);
}

}  // namespace

void check_model_executable(const Model& model) {
  for (int l = 0; l < model.num_layers(); ++l) {
    const Module& mod = model.module(model.module_of(l));
    check_executable(model.layer(l), "model.modules." + mod.name);
  }
  LayerGraph graph(model);
  for (int l = 0; l < model.num_layers(); ++l) {
    for (int p : graph.producers(l)) {
      const int out = output_width(model.layer(p));
      const int in = input_width(model.layer(l));
      if (out == in) continue;
      const auto& name = [&](int layer) { return model.module(model.module_of(layer)).name; };
      throw InputError("model.modules." + name(l) +
                       ".hidden: the executor needs a module's input "
                       "width to equal its producer's output width, but '" +
                       name(p) + "' outputs " + std::to_string(out) + " and '" + name(l) +
                       "' reads " + std::to_string(in));
    }
  }
}

HostModelState::HostModelState(const ExecProblem& problem, const LayerGraph& graph,
                               ReplicaId replica, const std::vector<int>& layers)
    : problem_(problem), graph_(graph), model_(*problem.model), replica_(replica) {
  for (const auto& per_replica : problem.schedule->samples) {
    for (const auto& mb : per_replica) batch_samples_ += isize(mb);
  }
  for (int l : layers) {
    params_[l] = init_parameters(model_.layer(l), l, problem.seed);
    if (!model_.layer(l).frozen) grads_[l] = zero_parameters(model_.layer(l));
  }
}

std::vector<SampleId> HostModelState::samples_of(MicrobatchId microbatch) const {
  return problem_.schedule->samples_of(replica_, microbatch);
}

Activation HostModelState::synthetic(int key, const std::vector<SampleId>& samples,
                                     const std::string& modality, int width,
                                     const std::vector<int>* lengths) const {
  Activation a;
  a.lengths = lengths ? *lengths : modality_lengths(*problem_.samples, samples, modality);
  a.x = synthetic_data(problem_.seed, key, modality, samples, a.lengths, width);
  return a;
}

const LayerTensors& HostModelState::params(int layer) {
  auto it = params_.find(layer);
  if (it == params_.end())  // a redundant copy holds the weights too
    it = params_.emplace(layer, init_parameters(model_.layer(layer), layer, problem_.seed)).first;
  return it->second;
}

Activation HostModelState::module_input(const Compute& op, bool redundant) {
  const int first = op.first_layer;
  const ModuleId module = model_.module_of(first);
  const Module& mod = model_.module(module);
  const std::vector<SampleId> samples = samples_of(op.microbatch);
  const auto& producers = graph_.producers(first);
  if (producers.empty())
    return synthetic(module.value(), samples, mod.modality, input_width(model_.layer(first)));
  if (redundant) {  // its output feeds nothing: the right shape is all that matters
    Activation a;
    int total = 0;
    for (const Sample* sample : sample_batch(*problem_.samples, samples)) {
      a.lengths.push_back(module_input_tokens(model_, module, *sample));
      total += a.lengths.back();
    }
    a.x = Matrix(total, input_width(model_.layer(first)));
    return a;
  }
  std::vector<Activation> parts;
  for (int p : producers) parts.push_back(take_edge({Pass::kF, op.microbatch, p, first}));
  if (!is_module_first(model_, first)) return std::move(parts.front());
  // A module fed by several producers (and an LLM's own text tokens) reads, per sample,
  // the rows of each producer in global layer order, then its text.
  if (mod.kind == ModuleKind::kLlm)
    parts.push_back(synthetic(module.value(), samples, "text", input_width(model_.layer(first))));
  Activation a;
  std::vector<std::vector<int>> pieces;
  int total = 0;
  for (const Activation& part : parts) {
    pieces.push_back(part.lengths);
    total += part.x.rows;
  }
  pieces_[{op.microbatch, first}] = pieces;
  a.x = Matrix(total, input_width(model_.layer(first)));
  std::vector<int> offsets(parts.size(), 0);
  int row = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    int len = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      const int n = parts[k].lengths.at(s);
      std::copy(parts[k].x.row(offsets[k]), parts[k].x.row(offsets[k] + n), a.x.row(row));
      offsets[k] += n;
      row += n;
      len += n;
    }
    a.lengths.push_back(len);
  }
  return a;
}

void HostModelState::forward(const Compute& op) {
  const bool redundant = is_redundant(op);
  Activation a = module_input(op, redundant);
  for (int l = op.first_layer; l < op.end_layer; ++l) {
    const LayerSpec& spec = model_.layer(l);
    LayerState st;
    st.lengths = a.lengths;
    a.x = layer_forward(spec, params(l), a.x, a.lengths, &st);
    if (!redundant && model_.has_trainable_upstream(l)) states_[{op.microbatch, l}] = std::move(st);
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0) a = resample_forward(a, ratio);
  }
  if (redundant) return;
  const int last = op.end_layer - 1;
  if (graph_.is_loss_layer(last)) {
    loss_gradient(last, op.microbatch, a);
    return;
  }
  const std::vector<EdgeKey> outs = forward_outputs(graph_, op);
  for (size_t i = 0; i < outs.size(); ++i)
    put_edge(outs[i], i + 1 < outs.size() ? a : std::move(a));
}

void HostModelState::loss_gradient(int layer, MicrobatchId microbatch, const Activation& y) {
  // L = sum over samples s of (1/B) (1/(T_s w)) sum 0.5 (y - t)^2 against a synthetic target
  // t: B is the iteration's batch, so gradients summed over microbatches and replicas
  // equal the sequential run's whatever the split.
  const std::vector<SampleId> samples = samples_of(microbatch);
  const Activation target = synthetic(-1 - layer, samples, "target", y.x.cols, &y.lengths);
  Activation dy{Matrix(y.x.rows, y.x.cols), y.lengths};
  int row = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const double norm = static_cast<double>(batch_samples_) * y.lengths[s] * y.x.cols;
    for (int r = 0; r < y.lengths[s]; ++r, ++row) {
      for (int c = 0; c < y.x.cols; ++c) {
        const float diff = y.x.at(row, c) - target.x.at(row, c);
        dy.x.at(row, c) = static_cast<float>(diff / norm);
        loss_ += 0.5 * diff * diff / norm;
      }
    }
  }
  loss_grads_[{microbatch, layer}] = std::move(dy);
}

void HostModelState::backward_input(const Compute& op) {
  const MicrobatchId mb = op.microbatch;
  const int first = op.first_layer, last = op.end_layer - 1;
  if (!model_.has_trainable_upstream(last)) return;  // Eq 3.3: no backward at all
  Matrix g;
  if (graph_.is_loss_layer(last)) {
    g = std::move(loss_grads_.at({mb, last}).x);
    loss_grads_.erase({mb, last});
  } else {
    for (const EdgeKey& key : backward_inputs(graph_, op)) {
      Activation part = take_edge(key);
      if (g.size() == 0)
        g = std::move(part.x);
      else
        add_inplace(g, part.x);  // a layer feeding several consumers sums their gradients
    }
  }
  const std::vector<EdgeKey> outs = backward_outputs(graph_, op);
  for (int l = last; l >= first; --l) {
    auto it = states_.find({mb, l});
    if (it == states_.end())
      throw std::logic_error("backward of layer " + std::to_string(l) + " microbatch " +
                             to_string(mb) + " before its forward");
    LayerState& st = it->second;
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0) {
      std::vector<int> out_lengths;
      for (int t : st.lengths) out_lengths.push_back(static_cast<int>(std::round(t * ratio)));
      g = resample_backward(g, st.lengths, out_lengths);
    }
    const bool need_dx = l > first ? model_.has_trainable_upstream(l - 1) : !outs.empty();
    const std::vector<int> lengths = st.lengths;
    g = layer_backward_input(model_.layer(l), params(l), st, g, lengths, need_dx);
    if (model_.layer(l).frozen) states_.erase(it);  // W has nothing to do for it
    if (!need_dx) return;
  }
  // Split the input gradient back along the edges the input came from.
  if (!is_module_first(model_, first)) {
    put_edge(outs.front(), {std::move(g), {}});
    return;
  }
  const std::vector<std::vector<int>> pieces = pieces_.at({mb, first});
  pieces_.erase({mb, first});
  const auto& producers = graph_.producers(first);
  for (size_t k = 0; k < producers.size(); ++k) {
    const EdgeKey key{Pass::kB, mb, producers[k], first};
    if (std::find(outs.begin(), outs.end(), key) == outs.end()) continue;
    Activation part;
    part.lengths = pieces[k];
    int total = 0;
    for (int n : part.lengths) total += n;
    part.x = Matrix(total, g.cols);
    int row = 0, dst = 0;
    for (size_t s = 0; s < part.lengths.size(); ++s) {
      int skip = 0;
      for (size_t j = 0; j < k; ++j) skip += pieces[j][s];
      std::copy(g.row(row + skip), g.row(row + skip + part.lengths[s]), part.x.row(dst));
      dst += part.lengths[s];
      for (const auto& p : pieces) row += p[s];
    }
    put_edge(key, std::move(part));
  }
}

void HostModelState::backward_weight(const Compute& op) {
  for (int l = op.first_layer; l < op.end_layer; ++l) {
    auto it = states_.find({op.microbatch, l});
    if (it == states_.end()) continue;  // frozen, or nothing trainable upstream
    if (it->second.grads.empty())
      throw std::logic_error("W of layer " + std::to_string(l) + " microbatch " +
                             to_string(op.microbatch) + " before its I");
    layer_backward_weight(model_.layer(l), it->second, grads_.at(l));
    states_.erase(it);
  }
}

Activation HostModelState::take_edge(const EdgeKey& key) {
  auto it = edges_.find(key);
  if (it == edges_.end()) {
    throw std::logic_error(std::string("no ") + (key.pass == Pass::kF ? "activation" : "gradient") +
                           " for microbatch " + to_string(key.microbatch) + " on edge layer " +
                           std::to_string(key.producer) + " -> " + std::to_string(key.boundary) +
                           " (its producer has not run on this rank, nor was it received)");
  }
  Activation a = std::move(it->second);
  edges_.erase(it);
  return a;
}

void HostModelState::put_edge(const EdgeKey& key, Activation value) {
  edges_[key] = std::move(value);
}

Gradients HostModelState::gradients() const {
  Gradients out;
  for (const auto& [layer, tensors] : grads_) {
    for (const auto& [name, m] : tensors) out[{layer, name}] = m.data;
  }
  return out;
}

void HostModelState::optimizer_step() {
  for (const auto& [layer, tensors] : grads_) {
    LayerTensors& params = params_.at(layer);
    for (const auto& [name, grad] : tensors)
      adam_step(params.at(name).data, grad.data, adam_[{layer, name}]);
  }
}

Parameters HostModelState::trained_parameters() const {
  Parameters out;
  for (const auto& [layer, tensors] : grads_) {
    for (const auto& [name, m] : params_.at(layer)) out[{layer, name}] = m.data;
  }
  return out;
}

std::vector<float> HostModelState::flat_gradients(const std::vector<int>& layers) const {
  std::vector<float> flat;
  for (int l : layers) {
    for (const auto& [name, m] : grads_.at(l))
      flat.insert(flat.end(), m.data.begin(), m.data.end());
  }
  return flat;
}

void HostModelState::set_flat_gradients(const std::vector<int>& layers,
                                        const std::vector<float>& flat) {
  auto from = flat.begin();
  for (int l : layers) {
    for (auto& [name, m] : grads_.at(l))
      from = std::ranges::copy_n(from, std::ssize(m.data), m.data.begin()).in;
  }
}

}  // namespace loom::exec
