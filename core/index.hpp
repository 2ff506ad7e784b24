#pragma once
/// Typed indices: a rank, a stage or a module is an int underneath, but mixing them up (a stage
/// used as a rank, a replica's rank used as the Schedule's, a module where a layer belongs) should
/// not compile. `Id<Tag>` is an int only its own kind of container accepts; `IdVector<Id, T>` is a
/// std::vector addressed by that Id alone, so the per-rank, per-stage and per-module tables need
/// no casts and cannot be indexed by a stray int.
#include <charconv>
#include <compare>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom {

/// A container's size as an int, the type of Loom's counts (ranks, stages, layers,
/// microbatches, samples). `std::ssize` gives a ptrdiff_t, which narrows again at every int it
/// meets; this is the one place that narrowing happens, and it is checked.
template <class Container>
constexpr int isize(const Container& c) {
  const auto n = std::ssize(c);
  if (!std::in_range<int>(n)) throw std::length_error("container too large for an int count");
  return static_cast<int>(n);
}

template <class Tag>
class Id {
 public:
  constexpr Id() = default;
  constexpr explicit Id(int value) : value_(value) {}
  constexpr int value() const { return value_; }
  /// Position in a container; an Id is never negative (std::optional says "none").
  constexpr std::size_t slot() const { return static_cast<std::size_t>(value_); }
  constexpr auto operator<=>(const Id&) const = default;
  constexpr Id& operator++() {
    ++value_;
    return *this;
  }
  /// Offsets: the same position one block of ids further (a rank of the next replica).
  constexpr Id& operator+=(int offset) {
    value_ += offset;
    return *this;
  }
  friend constexpr Id operator+(Id id, int offset) { return id += offset; }
  friend constexpr int operator-(Id a, Id b) { return a.value_ - b.value_; }
  friend std::ostream& operator<<(std::ostream& os, Id id) { return os << id.value_; }

 private:
  int value_ = 0;
};

template <class Tag>
std::string to_string(Id<Tag> id) {
  return std::to_string(id.value());
}
/// Appends an integer's (or an id's) decimal digits with no temporary string: the output
/// writers format several per op, 12 M ops at 16,384 GPUs.
template <class Int>
requires std::is_integral_v<Int>
void append_decimal(std::string& text, Int value) {
  char digits[24];
  text.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
}
template <class Tag>
void append_decimal(std::string& text, Id<Tag> id) {
  append_decimal(text, id.value());
}
/// JSON as the plain number (nlohmann::json finds these by ADL).
template <class Json, class Tag>
void to_json(Json& json, Id<Tag> id) {
  json = id.value();
}
template <class Json, class Tag>
void from_json(const Json& json, Id<Tag>& id) {
  id = Id<Tag>{json.template get<int>()};
}

/// Id{0} .. Id{n-1}, for range-for loops over a table's ids.
template <class IdT>
class IdRange {
 public:
  class iterator {
   public:
    using value_type = IdT;
    using difference_type = std::ptrdiff_t;
    constexpr iterator() = default;
    constexpr explicit iterator(int at) : at_(at) {}
    constexpr IdT operator*() const { return IdT{at_}; }
    constexpr iterator& operator++() {
      ++at_;
      return *this;
    }
    constexpr iterator operator++(int) { return iterator{at_++}; }
    constexpr bool operator==(const iterator&) const = default;

   private:
    int at_ = 0;
  };
  constexpr explicit IdRange(int count) : count_(count < 0 ? 0 : count) {}
  constexpr iterator begin() const { return iterator{0}; }
  constexpr iterator end() const { return iterator{count_}; }
  constexpr int size() const { return count_; }

 private:
  int count_ = 0;
};

template <class IdT, class T>
class IdVector {
 public:
  using value_type = T;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;
  using reference = typename std::vector<T>::reference;  // a proxy for std::vector<bool>
  using const_reference = typename std::vector<T>::const_reference;

  IdVector() = default;
  explicit IdVector(int count, const T& value = T()) : items_(slots(count), value) {}
  IdVector(std::initializer_list<T> init) : items_(init) {}
  /// Item i gets id i.
  explicit IdVector(std::vector<T> items) : items_(std::move(items)) {}

  reference operator[](IdT id) { return items_[id.slot()]; }
  const_reference operator[](IdT id) const { return items_[id.slot()]; }
  reference at(IdT id) { return items_.at(id.slot()); }
  const_reference at(IdT id) const { return items_.at(id.slot()); }
  bool contains(IdT id) const { return id.value() >= 0 && id.slot() < items_.size(); }

  int ssize() const { return isize(items_); }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  IdRange<IdT> ids() const { return IdRange<IdT>(ssize()); }
  /// The id the next push_back gets.
  IdT next_id() const { return IdT{ssize()}; }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  T& front() { return items_.front(); }
  const T& front() const { return items_.front(); }
  T& back() { return items_.back(); }
  const T& back() const { return items_.back(); }

  void push_back(const T& value) { items_.push_back(value); }
  void push_back(T&& value) { items_.push_back(std::move(value)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    return items_.emplace_back(std::forward<Args>(args)...);
  }
  void resize(int count) { items_.resize(slots(count)); }
  void clear() { items_.clear(); }
  void resize(int count, const T& value) { items_.resize(slots(count), value); }

  bool operator==(const IdVector&) const = default;

 private:
  static std::size_t slots(int count) { return count < 0 ? 0 : static_cast<std::size_t>(count); }
  std::vector<T> items_;
};

/// Declares an index type `Name`, an Id with a tag of its own, and its table `PerName<T>`.
/// A macro because a template cannot declare an alias template: without it every kind of
/// index is the same three lines written again (core/, the schedulers and the planners
/// declare two dozen).
#define LOOM_DECLARE_ID(Name, PerName)       \
  using Name = ::loom::Id<struct Name##Tag>; \
  template <class T>                         \
  using PerName = ::loom::IdVector<Name, T>

/// A rank of the Schedule IR: one program, run by one GPU or one tensor-parallel group.
LOOM_DECLARE_ID(RankId, PerRank);
/// A pipeline stage (a virtual stage where a rank holds several): an index into a
/// scheduler's PipelinePrograms::stages, and the stage an op of the Schedule IR belongs to.
LOOM_DECLARE_ID(StageId, PerStage);
/// A module of the model (an encoder, a projector, the LLM): an index into Model::modules, in
/// their topological order, and the module an op of the Schedule IR computes or moves data of.
LOOM_DECLARE_ID(ModuleId, PerModule);
/// A global layer of the model: an index into Model::layers and the per-layer cost tables.
LOOM_DECLARE_ID(LayerId, PerLayer);
/// A data-parallel replica of the pipeline (RankInfo::replica; a minibatch in Entrain §4.3).
LOOM_DECLARE_ID(ReplicaId, PerReplica);
/// A microbatch of one replica (an encoder microbatch M^enc_j where encoders batch apart).
LOOM_DECLARE_ID(MicrobatchId, PerMicrobatch);
/// A sample of the workload: an index into the samples a SchedulingProblem carries.
LOOM_DECLARE_ID(SampleId, PerSample);
/// A collective group of the Schedule IR: an index into Schedule::groups.
LOOM_DECLARE_ID(GroupId, PerGroup);

/// `2_rank`: a rank written as a literal (tests, hand-built schedules).
constexpr RankId operator""_rank(unsigned long long value) {
  return RankId{static_cast<int>(value)};
}

}  // namespace loom

template <class Tag>
struct std::hash<loom::Id<Tag>> {
  std::size_t operator()(loom::Id<Tag> id) const noexcept { return std::hash<int>{}(id.value()); }
};
