#pragma once
/// Context parallelism on the host (parallel.cp; schedulers/lowering/context_parallel.hpp):
/// which rows of each sequence a CP rank holds, and the exchange of one layer's keys and
/// values that the schedule's ops between the layer's parts carry, with real data.
///
/// Rows: a sample of T tokens is cut into 2 cp chunks of T / 2cp; CP rank i holds chunk i
/// then chunk 2cp - 1 - i (Megatron's zigzag split).
///
/// Ring (cp_comm = "p2p"), per layer, microbatch and pass on rank i of cp:
///   forward   the block in hand (own K, V first) goes to rank i + 1, the block of rank
///             i - 1 arrives; after cp - 1 steps the rank holds every rank's K and V and
///             attends its queries to all of them.
///   backward  the rank computes its queries' contributions to every block's dK, dV from
///             the K, V it attended to; each step passes a block with the dK, dV summed so
///             far (own contribution added on arrival), and a last hop hands each block's
///             total to its owner.
/// All-gather (cp_comm = "all-gather"): the same blocks all-gathered, and the dK, dV
/// contributions summed and scattered to their owners.
/// Ulysses (cp_comm = "a2a", DeepSpeed-Ulysses, Jacobs et al. 2023 §3.1): CP rank j owns
/// heads [j H/cp, (j+1) H/cp) and the matching K/V heads; an all-to-all gives it those
/// heads' Q, K, V for every rank's rows, it attends them over the whole sequence, and a
/// second all-to-all returns each rank its rows of the output. Backward mirrors it: the
/// output's gradient in by heads, dQ, dK, dV back by rows (HeadExchange).
#include <map>
#include <vector>

#include "executor/layer_math.hpp"

namespace loom::exec {

/// Positions (in their sample) of the rows CP rank `rank` of `cp` holds, samples of
/// `full_lengths` tokens in order.
std::vector<int> zigzag_positions(const std::vector<int>& full_lengths, int cp, int rank);
/// Their indices among the rows of samples of `full_lengths`, packed.
std::vector<int> zigzag_row_indices(const std::vector<int>& full_lengths, int cp, int rank);
/// Those rows of `full` (rows of samples of `full_lengths`, packed).
Matrix zigzag_rows(const Matrix& full, const std::vector<int>& full_lengths, int cp, int rank);

/// One layer's K/V exchange on one rank for one microbatch and pass.
class KvExchange {
 public:
  /// `local_lengths`: rows per sample this rank holds (full length / cp); `k`, `v` its own.
  KvExchange(int cp, int rank, std::vector<int> local_lengths, Matrix k, Matrix v);

  // Forward.
  /// The block in hand: K | V columns, and whose it is.
  Matrix forward_message(int* owner) const;
  void take_forward_message(int owner, Matrix message);
  /// Every owner's blocks (forward_message's form, or an all-gather's flat buffer).
  void take_all(const std::vector<float>& gathered);
  std::vector<float> own_flat() const;
  /// Keys and values of every rank, per sample in owner order, and the rows for attention
  /// (this rank's queries). Throws std::logic_error when a block is missing.
  void keys(Matrix& k, Matrix& v, AttentionRows& rows) const;

  // Backward.
  /// This rank's queries' gradients for every key row (keys()'s layout).
  void set_contributions(const Matrix& dk, const Matrix& dv);
  /// A ring step: K | V | dK | dV of the block in hand; a last hop: dK | dV.
  Matrix backward_message(bool last_hop, int* owner) const;
  void take_backward_message(int owner, const Matrix& message, bool last_hop);
  /// The summed dK, dV of every block in owner order (flat, for a reduce-scatter), and
  /// this rank's share of the sum.
  std::vector<float> contributions_flat() const;
  void take_own_sum(const std::vector<float>& summed_all);
  /// The dK, dV of this rank's own rows, summed over every rank's queries.
  const Matrix& own_dk() const { return own_dk_; }
  const Matrix& own_dv() const { return own_dv_; }

  int sends = 0, receives = 0;  ///< ring messages so far (the backward's last hop follows cp - 1)

 private:
  struct Block {
    Matrix k, v, dk, dv;
  };
  int cp_, rank_;
  std::vector<int> local_lengths_;
  std::map<int, Block> blocks_;        ///< owner -> its K, V (and the dK, dV summed here)
  std::map<int, Block> contribution_;  ///< owner -> this rank's share of its dK, dV
  int held_;                           ///< owner of the block in hand
  Matrix own_dk_, own_dv_;
};

/// One layer's Ulysses exchange on one CP rank for one microbatch, forward and backward:
/// four all-to-alls in order (forward: Q, K, V by heads, then the output by rows;
/// backward: the output's gradient by heads, then dQ, dK, dV by rows). outgoing() is what
/// the next one sends to each member, incoming() what it brought from each.
class HeadExchange {
 public:
  using Buffers = std::vector<std::vector<float>>;
  /// `local_lengths`: rows per sample this rank holds (full length / cp); q, k, v its
  /// own rows' projections, every head.
  HeadExchange(int cp, std::vector<int> local_lengths, int heads, int kv_heads, Matrix q, Matrix k,
               Matrix v);
  Buffers outgoing() const;
  void incoming(const Buffers& from);
  /// After the first: the attention core on the rank's heads over the whole sequence.
  void attend(bool causal);
  /// After the second: the core's output for the rank's own rows, every head.
  const Matrix& output() const { return local_[0]; }
  /// Backward, before the third: the output's gradient for the rank's own rows.
  void set_output_gradient(Matrix dout) { local_ = {std::move(dout)}; }
  /// After the third: the core's backward on the rank's heads.
  void attend_backward();
  /// After the fourth: dQ, dK, dV of the rank's own rows, every head.
  Matrix& dq() { return local_.at(0); }
  Matrix& dk() { return local_.at(1); }
  Matrix& dv() { return local_.at(2); }

 private:
  /// The full-sequence row of each of `owner`'s rows.
  std::vector<int> full_rows(int owner) const;
  int cp_, heads_, kv_heads_, head_dim_;
  std::vector<int> local_lengths_, full_lengths_;
  int exchanges_ = 0;             ///< all-to-alls done
  std::vector<Matrix> local_;     ///< the rank's rows: q, k, v; then output; dout; dq, dk, dv
  std::vector<Matrix> heads_in_;  ///< whole sequence, the rank's heads: q, k, v (kept)
  std::vector<Matrix> full_;      ///< whole sequence, the rank's heads: output, or dq, dk, dv
  Matrix dout_;                   ///< whole sequence, the rank's heads (backward)
  std::vector<Matrix> probs_;
};

}  // namespace loom::exec
