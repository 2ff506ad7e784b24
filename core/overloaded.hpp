#pragma once
namespace loom {
/// Visitor built from lambdas, for exhaustive std::visit over the Op variant.
template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
/// C++20 deduces this for aggregates, but clang < 17 (the sanitizer build's clang-14)
/// needs the guide spelled out.
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;
}  // namespace loom
