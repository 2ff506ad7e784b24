#include "executor/host_state.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "executor/sample_rows.hpp"
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
  out.lengths = resampled_lengths(a.lengths, ratio);
  int total = 0;
  for (int n : out.lengths) total += n;
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

void check_no_experts(const Model& model, const std::string& what) {
  for (int l = 0; l < model.num_layers(); ++l) {
    if (model.layer(l).moe())
      throw InputError("model.modules." + model.module(model.module_of(l)).name +
                       ".experts: " + what +
                       " does not run mixture-of-experts layers yet; the host backend's "
                       "`loom exec --backend host` does, and `loom sim` models them");
  }
}

HostModelState::HostModelState(const ExecProblem& problem, const LayerGraph& graph,
                               ReplicaId replica, const std::vector<int>& layers, int cp_rank,
                               ExpertGroup experts)
    : ModelStateBase(problem, graph, replica),
      cp_(problem.schedule->cp),
      cp_rank_(cp_rank),
      experts_(experts) {
  for (int l : layers) {
    params_[l] = init_parameters(model_.layer(l), l, problem.seed, 0, experts_);
    if (model_.layer(l).frozen) continue;
    grads_[l] = zero_parameters(model_.layer(l), 0, experts_);
    trained_layers_.push_back(l);
  }
}

Activation HostModelState::synthetic(int key, const std::vector<SampleId>& samples,
                                     const std::string& modality, int width,
                                     const std::vector<int>* lengths) const {
  Activation a;
  a.lengths = lengths ? *lengths : modality_lengths(*problem_.samples, samples, modality);
  if (cp_ > 1 && lengths) {  // `lengths` are this CP rank's rows: generate the whole samples
    for (int& n : a.lengths) n *= cp_;
  }
  a.x = synthetic_data(problem_.seed, key, modality, samples, a.lengths, width);
  if (cp_ > 1) {  // this CP rank's rows of each sample (ring_attention.hpp)
    a.x = zigzag_rows(a.x, a.lengths, cp_, cp_rank_);
    for (int& n : a.lengths) n /= cp_;
  }
  return a;
}

const LayerTensors& HostModelState::params(int layer) {
  auto it = params_.find(layer);
  if (it == params_.end())  // a redundant copy holds the weights too
    it =
        params_
            .emplace(layer, init_parameters(model_.layer(layer), layer, problem_.seed, 0, experts_))
            .first;
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
  std::vector<std::vector<int>> pieces;
  int total = 0;
  for (const Activation& part : parts) {
    pieces.push_back(part.lengths);
    total += part.x.rows;
  }
  PackPlan plan = pack_samples(pieces, isize(samples));
  edges_.put_packing(op.microbatch, first, std::move(pieces));
  Activation a{Matrix(total, input_width(model_.layer(first))), std::move(plan.lengths)};
  for (const RowBlock& b : plan.blocks) {
    const Matrix& from = parts[static_cast<size_t>(b.part)].x;
    std::copy(from.row(b.from_row), from.row(b.from_row + b.rows), a.x.row(b.to_row));
  }
  return a;
}

bool HostModelState::split_into_parts(const Compute& op) const {
  return cp_ > 1 && (op.continues || partial_forward_.count({op.microbatch, op.first_layer}) ||
                     (op.pass != Pass::kF && partial_dq_.count({op.microbatch, op.first_layer})));
}

void HostModelState::forward_part(const Compute& op) {
  const LayerKey key{op.microbatch, op.first_layer};
  const LayerSpec& spec = model_.layer(op.first_layer);
  auto it = partial_forward_.find(key);
  if (it == partial_forward_.end()) {  // the first part: norm and Q, K, V projections
    PartialForward p{.state = {}, .input = module_input(op, false)};
    p.state.lengths = p.input.lengths;
    layer_forward_qkv(params(op.first_layer), p.input.x, &p.state);
    exchanges_.erase(key);  // the exchange (ring or heads) starts with its first message
    heads_.erase(key);
    partial_forward_.emplace(key, std::move(p));
    current_part_ = key;
    return;
  }
  const auto heads = heads_.find(key);  // Ulysses
  if (op.continues) {  // a ring step (its messages move the data), or Ulysses' attention
    if (heads != heads_.end()) heads->second.attend(spec.causal);
    return;
  }
  PartialForward p = std::move(it->second);
  partial_forward_.erase(it);
  Activation a;
  if (heads != heads_.end()) {
    a = {layer_forward_from_attention(spec, params(op.first_layer), p.input.x,
                                      heads->second.output(), &p.state),
         p.input.lengths};
  } else {
    Matrix k, v;
    AttentionRows rows;
    exchanges_.at(key).keys(k, v, rows);
    a = {layer_forward_attend(spec, params(op.first_layer), p.input.x, k, v, rows, &p.state),
         p.input.lengths};
  }
  if (model_.has_trainable_upstream(op.first_layer)) {
    states_.put(op.microbatch, op.first_layer, std::move(p.state));
  } else {
    exchanges_.erase(key);
    heads_.erase(key);
  }
  finish_forward(op, std::move(a));
}

bool HostModelState::expert_part(const Compute& op) const {
  // A backward pass that backpropagates nothing (Eq 3.3) is not split (pass_compute.cpp).
  return experts_.ep > 1 && op.pass != Pass::kW && model_.layer(op.first_layer).moe() &&
         (op.pass == Pass::kF || model_.has_trainable_upstream(op.first_layer));
}

void HostModelState::forward_expert_part(const Compute& op) {
  const int l = op.first_layer;
  const LayerSpec& spec = model_.layer(l);
  const LayerTensors& p = params(l);
  last_flight_ = {false, op.microbatch, l};
  MoeFlight& f = flights_[last_flight_];
  const bool redundant = is_redundant(op);  // a copy whose output feeds nothing (bamboo)
  if (f.parts++ == 0) {  // attention, second norm, router: the copies to dispatch
    f.input = module_input(op, redundant);
    f.state.lengths = f.input.lengths;
    layer_forward_qkv(p, f.input.x, &f.state);
    const Matrix k = f.state.saved.at("k"), v = f.state.saved.at("v");
    f.x2 = layer_forward_attention(
        spec, p, f.input.x, k, v,
        AttentionRows::self(attention_segments(l, op.microbatch, f.input.lengths)), &f.state);
    f.outbox = moe_route(spec, p, f.state.saved.at("n2"), experts_, f.state.moe);
    return;
  }
  if (op.continues) {  // the owned experts over the copies received
    f.outbox = moe_experts_forward(spec, p, f.inbox, f.state.moe);
    return;
  }
  MoeFlight done = std::move(f);
  flights_.erase(last_flight_);
  Activation y{moe_combine(spec, p, done.x2, done.state.saved.at("n2"), std::move(done.inbox),
                           done.state.moe),
               done.input.lengths};
  if (redundant) return;
  if (model_.has_trainable_upstream(l)) states_.put(op.microbatch, l, std::move(done.state));
  finish_forward(op, std::move(y));
}

void HostModelState::backward_expert_part(const Compute& op) {
  const MicrobatchId mb = op.microbatch;
  const int l = op.first_layer;
  const LayerSpec& spec = model_.layer(l);
  const LayerTensors& p = params(l);
  last_flight_ = {true, mb, l};
  MoeFlight& f = flights_[last_flight_];
  LayerState& st = states_.of_forward(mb, l);
  if (f.parts++ == 0) {  // the combine's gradient: p dy to each copy's owner
    f.dy = edges_.take_output_gradient(
        graph_, op, [](Matrix& sum, const Matrix& part) { add_inplace(sum, part); });
    f.outbox = moe_combine_backward(spec, f.dy, st.moe);
    return;
  }
  if (op.continues) {  // the owned experts' backward: their copies' input gradients
    f.outbox = moe_experts_backward(spec, p, f.inbox, st.moe);
    return;
  }
  MoeFlight done = std::move(f);
  flights_.erase(last_flight_);
  const Matrix dn2 = moe_route_backward(spec, p, done.dy, done.inbox, st.moe);
  const bool need_dx = !backward_outputs(graph_, op).empty();
  Matrix dx = layer_backward_from_attention(spec, p, st,
                                            layer_backward_from_n2(p, st, done.dy, dn2), need_dx);
  if (spec.frozen) states_.erase(mb, l);
  if (need_dx) send_input_gradient(op, std::move(dx));
}

void HostModelState::expert_collective(const AllToAll& exchange) {
  MoeFlight& f = flights_.at(last_flight_);
  // Only the forward's dispatch carries each copy's expert; everything else comes back in
  // the order it went.
  const bool dispatch = !std::get<0>(last_flight_) && f.parts == 1;
  std::vector<std::vector<float>> out;
  for (const TokenCopies& copies : f.outbox) out.push_back(pack(copies));
  f.outbox.clear();
  f.inbox.clear();
  for (const std::vector<float>& in : exchange(std::move(out)))
    f.inbox.push_back(unpack(in, model_.layer(std::get<2>(last_flight_)).hidden, dispatch));
}

void HostModelState::forward(const Compute& op) {
  if (expert_part(op)) {
    forward_expert_part(op);
    return;
  }
  if (split_into_parts(op)) {
    forward_part(op);
    return;
  }
  const bool redundant = is_redundant(op);
  Activation a = module_input(op, redundant);
  for (int l = op.first_layer; l < op.end_layer; ++l) {
    const LayerSpec& spec = model_.layer(l);
    LayerState st;
    st.lengths = a.lengths;
    a.x = layer_forward(spec, params(l), a.x, attention_segments(l, op.microbatch, a.lengths), &st);
    if (!redundant && model_.has_trainable_upstream(l))
      states_.put(op.microbatch, l, std::move(st));
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0) a = resample_forward(a, ratio);
  }
  if (redundant) return;
  finish_forward(op, std::move(a));
}

void HostModelState::finish_forward(const Compute& op, Activation a) {
  if (graph_.is_loss_layer(op.end_layer - 1))
    loss_gradient(op.end_layer - 1, op.microbatch, a);
  else
    edges_.put_forward_outputs(graph_, op, std::move(a), [](const Activation& x) { return x; });
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
    // A CP rank holds 1/cp of each sample's rows; the mean is over the whole sample's.
    const double norm = static_cast<double>(batch_samples_) * y.lengths[s] * cp_ * y.x.cols;
    for (int r = 0; r < y.lengths[s]; ++r, ++row) {
      for (int c = 0; c < y.x.cols; ++c) {
        const float diff = y.x.at(row, c) - target.x.at(row, c);
        dy.x.at(row, c) = static_cast<float>(diff / norm);
        loss_ += 0.5 * diff * diff / norm;
      }
    }
  }
  edges_.put_loss_gradient(microbatch, layer, std::move(dy));
}

void HostModelState::backward_input_part(const Compute& op) {
  const MicrobatchId mb = op.microbatch;
  const int l = op.first_layer;
  const LayerKey key{mb, l};
  const LayerSpec& spec = model_.layer(l);
  auto it = partial_dq_.find(key);
  if (it == partial_dq_.end()) {  // the first part: MLP and output projection, then the
    // queries' gradients and their contributions to every rank's dK, dV
    if (!model_.has_trainable_upstream(l)) return;
    const Matrix g = edges_.take_output_gradient(
        graph_, op, [](Matrix& sum, const Matrix& part) { add_inplace(sum, part); });
    LayerState& st = states_.of_forward(mb, l);
    Matrix dattn = layer_backward_to_attention(spec, params(l), st, g);
    current_part_ = key;
    if (const auto heads = heads_.find(key); heads != heads_.end()) {  // Ulysses
      heads->second.set_output_gradient(std::move(dattn));
      partial_dq_.emplace(key, Matrix());
      return;
    }
    Matrix dq, dk, dv;
    attention_backward(dattn, st.saved.at("q"), st.saved.at("keys"), st.saved.at("values"),
                       st.probs, st.rows, spec.heads, spec.kv_heads, dq, dk, dv);
    exchanges_.at(key).set_contributions(dk, dv);
    partial_dq_.emplace(key, std::move(dq));
    return;
  }
  const auto heads = heads_.find(key);
  if (op.continues) {  // a ring step, or Ulysses' attention backward
    if (heads != heads_.end()) heads->second.attend_backward();
    return;
  }
  Matrix dq = std::move(it->second);
  partial_dq_.erase(it);
  LayerState& st = states_.of_forward(mb, l);
  const std::vector<EdgeKey> outs = backward_outputs(graph_, op);
  const bool need_dx = !outs.empty();
  Matrix dx;
  if (heads != heads_.end()) {
    HeadExchange& h = heads->second;
    dx = layer_backward_from_qkv(params(l), st, std::move(h.dq()), std::move(h.dk()),
                                 std::move(h.dv()), need_dx);
    heads_.erase(heads);
  } else {
    const KvExchange& ex = exchanges_.at(key);
    dx = layer_backward_from_qkv(params(l), st, std::move(dq), ex.own_dk(), ex.own_dv(), need_dx);
    exchanges_.erase(key);
  }
  if (spec.frozen) states_.erase(mb, l);
  if (need_dx) send_input_gradient(op, std::move(dx));
}

void HostModelState::backward_input(const Compute& op) {
  if (expert_part(op)) {
    backward_expert_part(op);
    return;
  }
  if (split_into_parts(op)) {
    backward_input_part(op);
    return;
  }
  const MicrobatchId mb = op.microbatch;
  const int first = op.first_layer, last = op.end_layer - 1;
  if (!model_.has_trainable_upstream(last)) return;  // Eq 3.3: no backward at all
  Matrix g = edges_.take_output_gradient(
      graph_, op, [](Matrix& sum, const Matrix& part) { add_inplace(sum, part); });
  const std::vector<EdgeKey> outs = backward_outputs(graph_, op);
  for (int l = last; l >= first; --l) {
    LayerState& st = states_.of_forward(mb, l);
    const double ratio = model_.module(model_.module_of(l)).token_ratio;
    if (is_module_last(model_, l) && ratio != 1.0)
      g = resample_backward(g, st.lengths, resampled_lengths(st.lengths, ratio));
    const bool need_dx = l > first ? model_.has_trainable_upstream(l - 1) : !outs.empty();
    const std::vector<int> lengths = st.lengths;
    g = layer_backward_input(model_.layer(l), params(l), st, g, lengths, need_dx);
    if (model_.layer(l).frozen) states_.erase(mb, l);  // W has nothing to do for it
    if (!need_dx) return;
  }
  send_input_gradient(op, std::move(g));
}

void HostModelState::send_input_gradient(const Compute& op, Matrix g) {
  const std::vector<EdgeKey> outs = backward_outputs(graph_, op);
  edges_.put_input_gradient(model_, graph_, op, std::move(g), outs,
                            [](const Matrix& packed, const std::vector<int>& lengths,
                               const std::vector<RowBlock>& blocks) {
                              int total = 0;
                              for (int n : lengths) total += n;
                              Activation part{Matrix(total, packed.cols), lengths};
                              for (const RowBlock& b : blocks)
                                std::copy(packed.row(b.from_row), packed.row(b.from_row + b.rows),
                                          part.x.row(b.to_row));
                              return part;
                            });
}

void HostModelState::backward_weight(const Compute& op) {
  if (op.continues) return;  // a B split into parts has its weight gradients at its last
  states_.backward_weight(op, [&](int layer, LayerState& st) {
    layer_backward_weight(model_.layer(layer), st, grads_.at(layer));
  });
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

namespace {

bool reduces(HostModelState::Reduced reduced, const std::string& name) {
  using R = HostModelState::Reduced;
  return reduced == R::kAll || (reduced == R::kExperts) == is_expert_parameter(name);
}

}  // namespace

std::vector<float> HostModelState::flat_gradients(const std::vector<int>& layers,
                                                  Reduced reduced) const {
  std::vector<float> flat;
  for (int l : layers) {
    for (const auto& [name, m] : grads_.at(l)) {
      if (reduces(reduced, name)) flat.insert(flat.end(), m.data.begin(), m.data.end());
    }
  }
  return flat;
}

void HostModelState::set_flat_gradients(const std::vector<int>& layers,
                                        const std::vector<float>& flat, Reduced reduced) {
  auto from = flat.begin();
  for (int l : layers) {
    for (auto& [name, m] : grads_.at(l)) {
      if (reduces(reduced, name))
        from = std::ranges::copy_n(from, std::ssize(m.data), m.data.begin()).in;
    }
  }
}

KvExchange& HostModelState::exchange(const LayerKey& key) {
  if (const auto it = exchanges_.find(key); it != exchanges_.end()) return it->second;
  // The forward's first message: the layer's own K and V, kept by its first part.
  const auto p = partial_forward_.find(key);
  if (p == partial_forward_.end())
    throw std::logic_error("a K/V exchange of layer " + std::to_string(key.second) +
                           " before the layer's first part");
  const LayerTensors& saved = p->second.state.saved;
  return exchanges_
      .emplace(key,
               KvExchange(cp_, cp_rank_, p->second.input.lengths, saved.at("k"), saved.at("v")))
      .first->second;
}

Activation HostModelState::context_send(const MessageTag& tag) {
  KvExchange& ex = exchange({tag.microbatch, tag.boundary_layer});
  int owner = 0;
  Matrix m = tag.pass == Pass::kF ? ex.forward_message(&owner)
                                  : ex.backward_message(ex.sends == cp_ - 1, &owner);
  ++ex.sends;
  return {std::move(m), {owner}};
}

void HostModelState::context_receive(const MessageTag& tag, Activation message) {
  KvExchange& ex = exchange({tag.microbatch, tag.boundary_layer});
  const int owner = message.lengths.at(0);
  if (tag.pass == Pass::kF)
    ex.take_forward_message(owner, std::move(message.x));
  else
    ex.take_backward_message(owner, message.x, ex.receives == cp_ - 1);
  ++ex.receives;
}

void HostModelState::context_all_to_all(int layer, const AllToAll& exchange_with) {
  if (layer != current_part_.second)
    throw std::logic_error("Ulysses: an all-to-all of layer " + std::to_string(layer) +
                           " after a part of layer " + std::to_string(current_part_.second));
  auto it = heads_.find(current_part_);
  if (it == heads_.end()) {  // the layer's forward starts: its Q, K, V go out by heads
    const LayerSpec& spec = model_.layer(current_part_.second);
    PartialForward& p = partial_forward_.at(current_part_);
    const LayerTensors& saved = p.state.saved;
    it = heads_
             .emplace(current_part_, HeadExchange(cp_, p.input.lengths, spec.heads, spec.kv_heads,
                                                  saved.at("q"), saved.at("k"), saved.at("v")))
             .first;
  }
  it->second.incoming(exchange_with(it->second.outgoing()));
}

void HostModelState::context_collective(CollectiveKind kind, const Rendezvous& exchange_with) {
  KvExchange& ex = exchange(current_part_);
  if (kind == CollectiveKind::kAllGather)
    ex.take_all(exchange_with(ex.own_flat()));
  else
    ex.take_own_sum(exchange_with(ex.contributions_flat()));
}

}  // namespace loom::exec
