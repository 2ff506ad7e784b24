#include "executor/sample_rows.hpp"

#include <cmath>

#include "core/index.hpp"

namespace loom::exec {

std::vector<int> resampled_lengths(const std::vector<int>& lengths, double ratio) {
  std::vector<int> out;
  for (int t : lengths) out.push_back(static_cast<int>(std::round(t * ratio)));
  return out;
}

PackPlan pack_samples(const std::vector<std::vector<int>>& part_lengths, int samples) {
  PackPlan plan;
  std::vector<int> offsets(part_lengths.size(), 0);
  int row = 0;
  for (int s = 0; s < samples; ++s) {
    int len = 0;
    for (int k = 0; k < isize(part_lengths); ++k) {
      const int n = part_lengths[static_cast<size_t>(k)].at(static_cast<size_t>(s));
      plan.blocks.push_back({k, offsets[static_cast<size_t>(k)], row, n});
      offsets[static_cast<size_t>(k)] += n;
      row += n;
      len += n;
    }
    plan.lengths.push_back(len);
  }
  return plan;
}

std::vector<RowBlock> unpack_part(const std::vector<std::vector<int>>& part_lengths, int k) {
  std::vector<RowBlock> blocks;
  const std::vector<int>& own = part_lengths[static_cast<size_t>(k)];
  int row = 0, dst = 0;
  for (size_t s = 0; s < own.size(); ++s) {
    int skip = 0;
    for (int j = 0; j < k; ++j) skip += part_lengths[static_cast<size_t>(j)][s];
    blocks.push_back({k, row + skip, dst, own[s]});
    dst += own[s];
    for (const auto& p : part_lengths) row += p[s];
  }
  return blocks;
}

}  // namespace loom::exec
