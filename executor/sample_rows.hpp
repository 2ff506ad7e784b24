#pragma once
/// How a microbatch's rows divide into its samples, as the host and the CUDA model states
/// both need it: the rows per sample a module's token_ratio leaves, and where each sample's
/// rows go when a module's input is packed from several producers, and back (per sample,
/// the rows of each part, producer then an LLM's own text, one after another). Packing is a
/// plan of block copies that each backend runs with its own copy (std::copy,
/// cudaMemcpyAsync).
///
///   part 0: a0 a0 | a1        packed: a0 a0 b0 | a1 b1 b1
///   part 1: b0    | b1 b1     (sample 0 | sample 1)
#include <vector>

namespace loom::exec {

/// `rows` rows from row `from_row` to row `to_row`: of part `part` into the packed tensor
/// (packing), or of the packed tensor into part `part` (unpacking).
struct RowBlock {
  int part = 0;
  int from_row = 0, to_row = 0;
  int rows = 0;
};

struct PackPlan {
  std::vector<RowBlock> blocks;  ///< parts -> packed tensor, in packed row order
  std::vector<int> lengths;      ///< rows per sample of the packed tensor
};

/// Rows per sample after a module's token_ratio `ratio`: round(T x ratio) for T rows
/// (core/workload.hpp's module_input_tokens rounds the same way).
std::vector<int> resampled_lengths(const std::vector<int>& lengths, double ratio);

/// Packs `samples` samples of parts whose rows per sample are `part_lengths[k]`.
PackPlan pack_samples(const std::vector<std::vector<int>>& part_lengths, int samples);

/// The inverse for part `k`: blocks from the packed tensor (their `part` is k) to part k's
/// own tensor, whose rows per sample are part_lengths[k].
std::vector<RowBlock> unpack_part(const std::vector<std::vector<int>>& part_lengths, int k);

}  // namespace loom::exec
