#pragma once
/// Sequence packing (`workload.packing = "pack:N"`): variable-length samples packed into
/// sequences of at most N tokens, as most multimodal training runs (Megatron's and NeMo's
/// packed sequences, the variable-length masks Cornstarch's context parallelism assumes).
/// A pack is one Sample to the schedulers (its token counts the sums of its samples'),
/// whose Sample::parts are the samples it holds: attention stays within each of them
/// (attention_items() in core/workload.hpp), so a pack costs its samples' attention, not a
/// pack-long sequence's.
///
/// The rule, first-fit: samples are taken in order; each goes into the first pack (in the
/// order packs were opened) whose length plus the sample's stays within N, where a length
/// counts the tokens the model's last module (the LLM) sees; a sample that fits no pack
/// opens a new one. When `packs` packs are open and a sample fits none of them, the batch
/// is complete and that sample is left for the next iteration. A sample longer than N is
/// never cut: it fills a pack of its own.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "core/workload.hpp"

namespace loom {

/// `workload.packing`: 0 = "none", else the pack length N of "pack:N".
int parse_packing(const std::string& text);
std::string format_packing(int pack_tokens);

/// The stream packing draws from: sample `i` (from 0), or nullopt where the stream ends.
using SampleStream = std::function<std::optional<Sample>(int i)>;

struct PackedBatch {
  std::vector<Sample> packs;  ///< ids 0.. in order; parts keep the samples' own ids
  int samples_used = 0;       ///< samples taken from the stream, every one in one pack
};

/// First-fit packing of `stream` into `packs` packs of `pack_tokens` tokens (rule above).
/// Ends early, with fewer packs, where the stream ends.
PackedBatch pack_samples(const Model& model, int packs, int pack_tokens,
                         const SampleStream& stream);

/// Samples per entry of `samples`: a pack counts its parts, a plain sample one.
int sample_count(const std::vector<Sample>& samples);

}  // namespace loom
