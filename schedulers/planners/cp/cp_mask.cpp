#include "schedulers/planners/cp/cp_mask.hpp"

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
  return may_attend(words[static_cast<std::size_t>(q)], words[static_cast<std::size_t>(k)], q, k,
                    window);
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
