#include "schedulers/cp_mask.hpp"

#include "core/errors.hpp"

namespace loom {
namespace {

struct KindName {
  MaskKind kind;
  const char* name;
};

constexpr KindName kKindNames[] = {
    {MaskKind::kCausal, "causal"},
    {MaskKind::kPrefix, "prefix"},
    {MaskKind::kEmbedded, "embedded"},
    {MaskKind::kPacked, "packed"},
    {MaskKind::kLambda, "lambda"},
    {MaskKind::kCausalBlockwise, "causal-blockwise"},
    {MaskKind::kSharedQuestion, "shared-question"},
};

}  // namespace

bool AttentionMask::attends(std::int64_t q, std::int64_t k) const {
  const std::uint64_t wq = words[static_cast<std::size_t>(q)];
  const std::uint64_t wk = words[static_cast<std::size_t>(k)];
  if (!modalities_compatible(wq, wk)) return false;
  if ((wq & kCausalBit) == 0) return true;
  if (k > q) return false;
  return window == 0 || q - k < window || (wk & kSinkBit) != 0;
}

const char* to_string(MaskKind kind) {
  for (const KindName& entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "?";
}

std::vector<std::string> mask_kind_names() {
  std::vector<std::string> names;
  for (const KindName& entry : kKindNames) names.emplace_back(entry.name);
  return names;
}

MaskKind parse_mask_kind(const std::string& name) {
  for (const KindName& entry : kKindNames) {
    if (name == entry.name) return entry.kind;
  }
  std::string valid;
  for (const std::string& n : mask_kind_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InputError("--mask: unknown mask '" + name + "' (valid: " + valid + ")");
}

}  // namespace loom
