#pragma once
/// Options that belong to one scheduler. A scheduler declares them once, as a struct with
/// defaults plus one `OptionField` per member (key, help, what it accepts); users write
/// them under `[schedule.<scheduler>]`:
///
///   struct Options { int chunks = 1; };
///   const OptionSet<Options> kOptions{{"chunks", &Options::chunks, "virtual stages per rank",
///                                      at_least(1)}};
///   const Options o = kOptions.read(problem.schedule, "interleaved-1f1b");
///
/// Precedence: `[schedule.<scheduler>]` > the flat `schedule.<legacy key>` of earlier
/// releases (still read for one release, with a warning naming the new key) > the struct's
/// default. Every value is checked (type, range, choices) and a bad one names its file,
/// line and key. core/config.cpp keeps the values untyped and knows no scheduler.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace loom {

enum class OptionKind { kInteger, kIntegerOrAuto, kNumber, kBoolean, kChoice, kIntegerList };

/// What a value must be, beyond its type: at_least(1), one_of({"a", "b"}), and the flat
/// key of earlier releases when it differs from the option's: at_least(0).formerly("dip_seed").
struct OptionLimits {
  double min = 0;                    ///< integer, number, integer-list element: least value
  std::vector<std::string> choices;  ///< choice: the accepted words
  /// The flat `schedule.<key>` that earlier releases read ("" = the option's own key).
  std::string legacy;
  /// An integer value at which the scheduler degenerates into another (interleaved 1F1B
  /// with one chunk is 1F1B), and the warning that says so when it runs with it.
  std::optional<std::int64_t> degenerate_at;
  std::string degenerate_note;

  OptionLimits formerly(std::string flat_key) const {
    OptionLimits l = *this;
    l.legacy = std::move(flat_key);
    return l;
  }
  OptionLimits degenerates_at(std::int64_t value, std::string note) const {
    OptionLimits l = *this;
    l.degenerate_at = value;
    l.degenerate_note = std::move(note);
    return l;
  }
};

inline OptionLimits at_least(double min) {
  OptionLimits l;
  l.min = min;
  return l;
}
inline OptionLimits one_of(std::vector<std::string> choices) {
  OptionLimits l;
  l.choices = std::move(choices);
  return l;
}
inline OptionLimits formerly(std::string flat_key) {
  return OptionLimits{}.formerly(std::move(flat_key));
}

/// One declared option, untyped: what `loom schedulers NAME` prints and what the load-time
/// check reads.
struct OptionSpec {
  std::string key;
  OptionKind kind = OptionKind::kInteger;
  std::string help;
  OptionLimits limits;
  std::string default_text;  ///< the default as TOML writes it

  const std::string& legacy_key() const { return limits.legacy.empty() ? key : limits.legacy; }
  std::string type_text() const;  ///< "an integer >= 1", "one of \"a\" | \"b\"", ...
};

/// A value checked against `spec`: returns it converted to the member's type, or throws
/// InputError naming the value's origin (file and line), `key` and what it accepts.
std::int64_t checked_integer(const OptionSpec& spec, const OptionValue& v, const std::string& key);
/// An integer, or the word "auto" (nullopt: the scheduler decides).
std::optional<int> checked_integer_or_auto(const OptionSpec& spec, const OptionValue& v,
                                           const std::string& key);
double checked_number(const OptionSpec& spec, const OptionValue& v, const std::string& key);
bool checked_boolean(const OptionSpec& spec, const OptionValue& v, const std::string& key);
std::string checked_choice(const OptionSpec& spec, const OptionValue& v, const std::string& key);
std::vector<int> checked_integer_list(const OptionSpec& spec, const OptionValue& v,
                                      const std::string& key);

/// The value of `spec` for `scheduler`: its table's, else the flat legacy key's, else null.
/// `key` is set to the key the value was written under.
const OptionValue* find_option(const ScheduleConfig& schedule, const std::string& scheduler,
                               const OptionSpec& spec, std::string& key);

/// The option kind, default text and checked read of a member of type T.
template <class T>
struct OptionType;
template <>
struct OptionType<int> {
  static constexpr OptionKind kKind = OptionKind::kInteger;
  static std::string text(int v) { return std::to_string(v); }
  static int read(const OptionSpec& s, const OptionValue& v, const std::string& key) {
    return static_cast<int>(checked_integer(s, v, key));
  }
};
/// An integer the scheduler may choose itself: `"auto"` (nullopt) or a number.
template <>
struct OptionType<std::optional<int>> {
  static constexpr OptionKind kKind = OptionKind::kIntegerOrAuto;
  static std::string text(const std::optional<int>& v) {
    return v ? std::to_string(*v) : "\"auto\"";
  }
  static std::optional<int> read(const OptionSpec& s, const OptionValue& v,
                                 const std::string& key) {
    return checked_integer_or_auto(s, v, key);
  }
};
template <>
struct OptionType<double> {
  static constexpr OptionKind kKind = OptionKind::kNumber;
  static std::string text(double v);
  static double read(const OptionSpec& s, const OptionValue& v, const std::string& key) {
    return checked_number(s, v, key);
  }
};
template <>
struct OptionType<bool> {
  static constexpr OptionKind kKind = OptionKind::kBoolean;
  static std::string text(bool v) { return v ? "true" : "false"; }
  static bool read(const OptionSpec& s, const OptionValue& v, const std::string& key) {
    return checked_boolean(s, v, key);
  }
};
template <>
struct OptionType<std::string> {
  static constexpr OptionKind kKind = OptionKind::kChoice;
  static std::string text(const std::string& v) { return "\"" + v + "\""; }
  static std::string read(const OptionSpec& s, const OptionValue& v, const std::string& key) {
    return checked_choice(s, v, key);
  }
};
/// "[1, 2]", as TOML writes an array of integers.
template <class Int>
std::string integer_list_text(const std::vector<Int>& v) {
  std::string t = "[";
  for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
  return t + "]";
}

template <>
struct OptionType<std::vector<int>> {
  static constexpr OptionKind kKind = OptionKind::kIntegerList;
  static std::string text(const std::vector<int>& v) { return integer_list_text(v); }
  static std::vector<int> read(const OptionSpec& s, const OptionValue& v, const std::string& key) {
    return checked_integer_list(s, v, key);
  }
};

/// One member of an options struct, bound to its declaration.
template <class Options>
struct OptionField {
  template <class T>
  OptionField(const char* key, T Options::*member, const char* help, OptionLimits limits = {})
      : read([member](Options& o, const OptionSpec& s, const OptionValue& v,
                      const std::string& written_as) {
          o.*member = OptionType<T>::read(s, v, written_as);
        }),
        default_text([member](const Options& o) { return OptionType<T>::text(o.*member); }) {
    spec.key = key;
    spec.kind = OptionType<T>::kKind;
    spec.help = help;
    spec.limits = std::move(limits);
  }

  OptionSpec spec;  ///< default_text left empty: it comes from the struct
  std::function<void(Options&, const OptionSpec&, const OptionValue&, const std::string&)> read;
  std::function<std::string(const Options&)> default_text;
};

/// A scheduler's options: the struct `Options` (its defaults) and its fields.
template <class Options>
class OptionSet {
 public:
  OptionSet(std::initializer_list<OptionField<Options>> fields) : fields_(fields) {}

  std::vector<OptionSpec> specs() const {
    std::vector<OptionSpec> out;
    const Options defaults{};
    for (const OptionField<Options>& f : fields_) {
      out.push_back(f.spec);
      out.back().default_text = f.default_text(defaults);
    }
    return out;
  }

  /// The options `scheduler` runs with, every value checked.
  Options read(const ScheduleConfig& schedule, const std::string& scheduler) const {
    Options o{};
    for (const OptionField<Options>& f : fields_) {
      std::string written_as;
      if (const OptionValue* v = find_option(schedule, scheduler, f.spec, written_as))
        f.read(o, f.spec, *v, written_as);
    }
    return o;
  }

 private:
  std::vector<OptionField<Options>> fields_;
};

/// Sets one option as code does where a user would write it (tests, replay, benchmarks).
void set_option(ScheduleConfig& schedule, const std::string& scheduler, const std::string& key,
                OptionValue::Value value);

/// The selected scheduler's (schedule.name's) value of integer option `key`, checked, or
/// `fallback` when it declares no such option: for estimates made before planning (e.g.
/// chunks per rank in the plan-size check).
int selected_integer_option(const ScheduleConfig& schedule, const std::string& key, int fallback);

/// Checks every `[schedule.<name>]` table and flat legacy key against the registered
/// schedulers' declarations: an unknown scheduler or key, or a bad value, throws
/// InputError naming the file, line, key and fix. Returns one warning per flat legacy key
/// (what to write instead, and whether the selected scheduler takes it).
std::vector<std::string> check_scheduler_options(const ScheduleConfig& schedule);

}  // namespace loom
