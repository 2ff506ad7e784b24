#pragma once
/// The synthetic training data of `loom exec` (module inputs and loss targets), ONE
/// definition for both backends: the host backend (host_state.cpp) and the sequential
/// reference build it on the CPU; the cuda backend (cuda/model_state.cpp) builds the same
/// matrices on the host and uploads them. Equal data is what lets a cuda run's gradients
/// be checked against the host reference.
#include <cstdint>
#include <string>
#include <vector>

#include "core/workload.hpp"
#include "executor/tensor.hpp"

namespace loom::exec {

/// Tokens of `modality` in sample `s` (0 when it has none).
int tokens_of(const Sample& s, const std::string& modality);

/// Rows per sample of the synthetic `modality` input for the samples `ids` (indices into
/// `samples`): each sample's tokens of that modality.
std::vector<int> modality_lengths(const std::vector<Sample>& samples,
                                  const std::vector<SampleId>& ids, const std::string& modality);

/// `lengths[s]` rows of `width` values for each sample ids[s], stacked in order; every
/// value in [-1, 1) is a pure function of (seed, key, modality, sample id, row, column),
/// so every schedule, rank and backend sees the same numbers for the same sample.
/// `key`: the module index for a module's input, -1 - layer for the loss target of
/// `layer` (modality "target"). Requires lengths.size() == ids.size().
Matrix synthetic_data(std::uint64_t seed, int key, const std::string& modality,
                      const std::vector<SampleId>& ids, const std::vector<int>& lengths, int width);

}  // namespace loom::exec
