#include "executor/synthetic_data.hpp"

#include <functional>

namespace loom::exec {

int tokens_of(const Sample& s, const std::string& modality) {
  const auto it = s.tokens.find(modality);
  return it == s.tokens.end() ? 0 : it->second;
}

std::vector<int> modality_lengths(const std::vector<Sample>& samples,
                                  const std::vector<SampleId>& ids, const std::string& modality) {
  std::vector<int> lengths;
  lengths.reserve(ids.size());
  for (const Sample* sample : sample_batch(samples, ids))
    lengths.push_back(tokens_of(*sample, modality));
  return lengths;
}

Matrix synthetic_data(std::uint64_t seed, int key, const std::string& modality,
                      const std::vector<SampleId>& ids, const std::vector<int>& lengths,
                      int width) {
  int total = 0;
  for (int t : lengths) total += t;
  Matrix x(total, width);
  int row = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    // The per-sample key does not depend on the microbatch or the rank: the same sample
    // gets the same data in every schedule (the reference runs each sample alone).
    const std::uint64_t sample_key =
        hash_combine(hash_combine(hash_combine(seed, 0x1234), static_cast<std::uint64_t>(key)),
                     hash_combine(std::hash<std::string>{}(modality),
                                  static_cast<std::uint64_t>(ids[s].value())));
    for (int r = 0; r < lengths[s]; ++r, ++row)
      for (int c = 0; c < width; ++c)
        x.at(row, c) =
            hash_uniform(hash_combine(sample_key, static_cast<std::uint64_t>(r) * width + c));
  }
  return x;
}

}  // namespace loom::exec
