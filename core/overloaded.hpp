#pragma once
namespace loom {
/// Visitor built from lambdas, for exhaustive std::visit over the Op variant.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
}  // namespace loom
