#include "core/packing.hpp"

#include <charconv>

#include "core/errors.hpp"

namespace loom {

int parse_packing(const std::string& text) {
  if (text == "none") return 0;
  const std::string prefix = "pack:";
  int n = 0;
  if (text.rfind(prefix, 0) == 0) {
    const char* first = text.data() + prefix.size();
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, n);
    if (ec == std::errc() && end == last && n >= 1) return n;
  }
  throw InputError("'" + text +
                   "' is not a packing: give \"none\" or \"pack:N\" (sequences of at most N "
                   "tokens, N >= 1, e.g. \"pack:8192\")");
}

std::string format_packing(int pack_tokens) {
  return pack_tokens == 0 ? "none" : "pack:" + std::to_string(pack_tokens);
}

namespace {

/// The tokens a sample puts into a pack: what the model's last module (the LLM) sees.
int pack_length(const Model& model, const Sample& sample) {
  return module_input_tokens(model, model.module_of(model.num_layers() - 1), sample);
}

void add_to_pack(Sample& pack, Sample sample) {
  for (const auto& [modality, tokens] : sample.tokens) pack.tokens[modality] += tokens;
  pack.parts.push_back(std::move(sample));
}

}  // namespace

PackedBatch pack_samples(const Model& model, int packs, int pack_tokens,
                         const SampleStream& stream) {
  PackedBatch out;
  std::vector<int> length;  // per open pack
  for (int i = 0;; ++i) {
    std::optional<Sample> sample = stream(i);
    if (!sample) break;
    const int n = pack_length(model, *sample);
    size_t p = 0;
    while (p < length.size() && length[p] + n > pack_tokens) ++p;
    if (p == length.size()) {
      if (isize(out.packs) == packs) break;  // the batch is complete
      Sample& opened = out.packs.emplace_back();
      opened.id = isize(out.packs) - 1;
      length.push_back(0);
    }
    length[p] += n;
    add_to_pack(out.packs[p], std::move(*sample));
    ++out.samples_used;
  }
  return out;
}

int sample_count(const std::vector<Sample>& samples) {
  int n = 0;
  for (const Sample& s : samples) n += s.parts.empty() ? 1 : isize(s.parts);
  return n;
}

}  // namespace loom
