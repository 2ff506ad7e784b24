#pragma once
/// Workload: a batch of samples, each with a token count per modality ("text", "vision",
/// "audio", ...). Fixed-size synthetic samples or a CSV (`sample_id,text_tokens,...`).
#include <map>
#include <string>
#include <vector>

#include "core/image_tokens.hpp"
#include "core/index.hpp"
#include "core/model.hpp"

namespace loom {

struct Sample {
  int id = 0;
  std::map<std::string, int> tokens;  ///< modality -> tokens (e.g. "text" -> 1024)
};

/// `count` identical samples with the given per-modality token counts.
std::vector<Sample> synthetic_samples(int count, const std::map<std::string, int>& tokens);

/// Reads `sample_id,text_tokens,<modality>_tokens,...`. Column names ending in `_tokens`
/// name modalities (`image_tokens` is read as `vision`); a `<modality>_resolution` column
/// holds image sizes `WxH` (several images `WxH;WxH`) converted by image_tokens().
/// Throws InputError naming the file and line on malformed input or a sample with no
/// tokens at all. `images` says how a resolution becomes tokens (core/image_tokens.hpp).
std::vector<Sample> load_samples_csv(const std::string& path, const ImageTokenRule& images = {});

/// The samples `ids` names, in order: a microbatch as the cost model reads it. Throws
/// std::out_of_range on an id past `samples`.
std::vector<const Sample*> sample_batch(const std::vector<Sample>& samples,
                                        const std::vector<SampleId>& ids);
/// The first `count` samples (all of them if there are fewer): the representative
/// microbatch that partitioners and planners cost an iteration by.
std::vector<const Sample*> first_samples(const std::vector<Sample>& samples, int count);

/// Vision tokens of one image of `width` x `height` pixels: Qwen2-VL-style 14-pixel
/// patches, sides rounded up to a multiple of 28 (2x2 patch merge).
int image_patch_tokens(int width, int height);

/// Tokens a module processes for one sample: an encoder its modality's tokens; a module
/// with inputs the sum of its inputs' output tokens (the LLM adds the text tokens); the
/// output of a module is its input scaled by token_ratio.
int module_input_tokens(const Model& model, ModuleId module, const Sample& sample);

/// Per-sample sequence lengths a layer sees for one microbatch: what cost models consume.
struct MicrobatchShape {
  std::vector<int> sequence_lengths;
  double total_tokens() const;
  double sum_squared() const;  ///< sum of s^2 over samples (attention is quadratic)
};
MicrobatchShape layer_shape(const Model& model, int global_layer,
                            const std::vector<const Sample*>& samples);

}  // namespace loom
