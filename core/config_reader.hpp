#pragma once
/// The config reader the sections share (core/config.cpp reads the model, cluster, cost,
/// parallel and schedule sections; each section that belongs to one part of Loom is read
/// in that part's own file, as config_replay.cpp reads [replay]). Only config*.cpp include
/// it: it brings in toml++.
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/spelling.hpp"
#include "core/units.hpp"

namespace loom::config {

inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

/// Files named in a config are relative to the config's directory (so a study directory
/// can move), unless absolute.
inline std::string relative_to_config(const std::string& config_path, const std::string& file) {
  if (file.empty() || std::filesystem::path(file).is_absolute()) return file;
  return (std::filesystem::path(config_path).parent_path() / file).lexically_normal().string();
}

/// Reads typed values out of the TOML tree, remembering which nodes were read so that
/// anything left over is reported as an unknown key, and what value each key resolved to
/// (defaults included) for `--dump`.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  /// "file:line", or "file (--set)" for a value that came from the command line.
  std::string where(const toml::node* node) const {
    if (node && node->source().begin.line > 0)
      return file_ + ":" + std::to_string(node->source().begin.line);
    return node ? file_ + " (--set)" : file_;
  }

  [[noreturn]] void fail(const toml::node* node, const std::string& key,
                         const std::string& what) const {
    throw InputError(where(node) + ": key '" + key + "': " + what);
  }

  const toml::node* find(const toml::table& t, const std::string& key) {
    const toml::node* n = t.get(key);
    if (n) used_.insert(n);
    return n;
  }

  const toml::table* section(const toml::table& t, const std::string& path,
                             const std::string& key) {
    const toml::node* n = find(t, key);
    if (!n) return nullptr;
    if (!n->is_table()) fail(n, path + key, "expected a table");
    return n->as_table();
  }

  int integer(const toml::table& t, const std::string& path, const std::string& key, int def,
              int min) {
    const toml::node* n = find(t, key);
    int v = def;
    if (n) {
      if (!n->is_integer()) fail(n, path + key, "expected an integer, got " + describe(*n));
      const auto raw = *n->value<std::int64_t>();
      if (raw < min || raw > 1'000'000'000) {
        fail(n, path + key,
             "must be an integer from " + std::to_string(min) + " to 1000000000, got " +
                 std::to_string(raw));
      }
      v = static_cast<int>(raw);
    }
    record(path + key, std::int64_t{v});
    return v;
  }

  /// Replaces the value recorded for `key` (a value derived from other keys, or a value in
  /// its canonical form).
  template <class T>
  void rerecord(const std::string& key, T value) {
    for (size_t i = 0; i < resolved_keys_.size(); ++i) {
      if (resolved_keys_[i] == key)
        resolved_values_.replace(resolved_values_.cbegin() + static_cast<std::ptrdiff_t>(i), value);
    }
  }

  /// A finite number >= 0 (> 0 when `positive`).
  double number(const toml::table& t, const std::string& path, const std::string& key, double def,
                bool positive = false) {
    const toml::node* n = find(t, key);
    double v = def;
    if (n) {
      if (!n->is_number()) fail(n, path + key, "expected a number, got " + describe(*n));
      v = n->is_integer() ? static_cast<double>(*n->value<std::int64_t>()) : *n->value<double>();
      if (!std::isfinite(v) || v < 0 || (positive && v == 0)) {
        fail(
            n, path + key,
            std::string(positive ? "must be a finite number > 0" : "must be a finite number >= 0") +
                ", got " + describe(*n));
      }
    }
    record(path + key, v);
    return v;
  }

  bool boolean(const toml::table& t, const std::string& path, const std::string& key, bool def) {
    const toml::node* n = find(t, key);
    bool v = def;
    if (n) {
      if (!n->is_boolean()) fail(n, path + key, "expected true or false, got " + describe(*n));
      v = *n->value<bool>();
    }
    record(path + key, v);
    return v;
  }

  std::string string(const toml::table& t, const std::string& path, const std::string& key,
                     const std::string& def, const std::vector<std::string>& allowed = {}) {
    const toml::node* n = find(t, key);
    std::string v = def;
    if (n) {
      // `--set schedule.partition_view=true` arrives as a TOML boolean: a choice between
      // "true" and "false" takes it as the word.
      const bool word_choice = std::find(allowed.begin(), allowed.end(), "true") != allowed.end();
      if (n->is_boolean() && word_choice)
        v = *n->value<bool>() ? "true" : "false";
      else if (!n->is_string())
        fail(n, path + key, "expected a string, got " + describe(*n));
      else
        v = *n->value<std::string>();
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        fail(n, path + key, "'" + v + "' is not one of: " + join(allowed));
      }
    }
    record(path + key, v);
    return v;
  }

  /// A quantity with units ("0.5ms", "25GBps") or a bare number in base units; must be >= 0
  /// (or > 0 when `positive`).
  double quantity(const toml::table& t, const std::string& path, const std::string& key, double def,
                  std::optional<double> (*parse)(std::string_view), const char* example,
                  bool positive) {
    const toml::node* n = find(t, key);
    double v = def;
    if (n) {
      std::optional<double> parsed;
      if (n->is_number())
        parsed =
            n->is_integer() ? static_cast<double>(*n->value<std::int64_t>()) : *n->value<double>();
      else if (n->is_string())
        parsed = parse(*n->value<std::string>());
      if (!parsed)
        fail(n, path + key,
             std::string("expected a quantity like \"") + example + "\", got " + describe(*n));
      v = *parsed;
      if (!std::isfinite(v) || v < 0 || (positive && v == 0)) {
        fail(n, path + key,
             std::string(positive ? "must be finite and > 0" : "must be finite and >= 0") +
                 ", got " + describe(*n));
      }
    }
    record(path + key, v);
    return v;
  }

  std::vector<int> int_list(const toml::table& t, const std::string& path, const std::string& key) {
    std::vector<int> out;
    const toml::node* n = find(t, key);
    if (!n) return out;
    if (!n->is_array()) fail(n, path + key, "expected an array of integers");
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_integer() || *e.value<std::int64_t>() < 0)
        fail(n, path + key, "expected non-negative integers");
      out.push_back(static_cast<int>(*e.value<std::int64_t>()));
    }
    toml::array values;
    for (int v : out) values.push_back(std::int64_t{v});
    record(path + key, std::move(values));
    return out;
  }

  /// An array of quantities ("2us", or plain numbers in base units), each at least `min`.
  std::vector<double> quantity_list(const toml::table& t, const std::string& path,
                                    const std::string& key,
                                    std::optional<double> (*parse)(std::string_view),
                                    const char* example, double min) {
    std::vector<double> out;
    const toml::node* n = find(t, key);
    if (!n) return out;
    if (!n->is_array()) fail(n, path + key, std::string("expected an array like ") + example);
    for (const toml::node& e : *n->as_array()) {
      std::optional<double> v = e.is_number() ? e.value<double>() : std::nullopt;
      if (e.is_string()) v = parse(*e.value<std::string>());
      if (!v || !std::isfinite(*v) || *v < min) {
        fail(n, path + key,
             std::string("expected an array like ") + example + " (each at least " +
                 std::to_string(min).substr(0, 3) + "), got " + describe(e));
      }
      out.push_back(*v);
    }
    toml::array values;
    for (double v : out) values.push_back(v);
    record(path + key, std::move(values));
    return out;
  }

  /// An array of probabilities (numbers from 0 to 1; integers read as numbers).
  std::vector<double> probability_list(const toml::table& t, const std::string& path,
                                       const std::string& key) {
    std::vector<double> out;
    const toml::node* n = find(t, key);
    if (!n) return out;
    if (!n->is_array()) fail(n, path + key, "expected an array of probabilities");
    for (const toml::node& e : *n->as_array()) {
      const std::optional<double> v = e.is_number() ? e.value<double>() : std::nullopt;
      if (!v || !(*v >= 0 && *v <= 1))
        fail(n, path + key, "expected probabilities (numbers from 0 to 1), got " + describe(e));
      out.push_back(*v);
    }
    toml::array values;
    for (double v : out) values.push_back(v);
    record(path + key, std::move(values));
    return out;
  }

  std::vector<std::string> string_list(const toml::table& t, const std::string& path,
                                       const std::string& key) {
    std::vector<std::string> out;
    const toml::node* n = find(t, key);
    if (!n) return out;
    if (!n->is_array()) fail(n, path + key, "expected an array of strings");
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) fail(n, path + key, "expected an array of strings");
      out.push_back(*e.value<std::string>());
    }
    toml::array values;
    for (const std::string& v : out) values.push_back(v);
    record(path + key, std::move(values));
    return out;
  }

  /// Reports the first key that no part of Loom read.
  /// A required key is missing: fails naming it, and an unread key of `t` that looks
  /// like a typo of it ("hiden" for "hidden").
  [[noreturn]] void fail_missing(const toml::table& t, const std::string& path,
                                 const std::string& key, const std::string& what) const {
    for (const auto& [k, node] : t) {
      const std::string written(k.str());
      if (!used_.count(&node) && closest_spelling(written, {key}) == key)
        fail(&node, path + written,
             "unknown key; did you mean '" + key + "'? (" + path + key + " is " + what + ")");
    }
    fail(&t, path + key, what);
  }

  void check_unknown(const toml::table& t, const std::string& path) const {
    for (const auto& [key, node] : t) {
      const std::string full = path + std::string(key.str());
      if (!used_.count(&node))
        fail(&node, full,
             std::string(path.empty() ? "unknown section" : "unknown key") +
                 did_you_mean(std::string(key.str()), known_keys(path)) +
                 " (`loom config CONFIG --dump` lists every key with its value)");
      if (node.is_table()) check_unknown(*node.as_table(), full + ".");
      if (node.is_array_of_tables()) {
        int i = 0;
        for (const toml::node& e : *node.as_array()) {
          const std::string name =
              e.as_table()->get("name") && e.as_table()->get("name")->is_string()
                  ? *e.as_table()->get("name")->value<std::string>()
                  : std::to_string(i);
          check_unknown(*e.as_table(), full + "." + name + ".");
          ++i;
        }
      }
    }
  }

  void mark(const toml::node* n) { used_.insert(n); }
  bool was_read(const toml::node& n) const { return used_.count(&n) > 0; }
  /// Marks `n` read and records its value as `key`'s resolved value.
  void mark(const toml::node* n, const std::string& key) {
    used_.insert(n);
    n->visit([&](const auto& v) { record(key, v); });
  }
  /// The names known directly under `path` ("cluster." -> gpu, nodes, ...; "" -> the
  /// sections): every key read there, defaults included.
  std::vector<std::string> known_keys(const std::string& path) const {
    std::vector<std::string> out;
    for (const std::string& k : resolved_keys_) {
      if (!k.starts_with(path)) continue;
      const std::string name = k.substr(path.size(), k.find('.', path.size()) - path.size());
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    return out;
  }
  /// Every key read, in reading order, with the value it resolved to (defaults included).
  const std::vector<std::string>& resolved_keys() const { return resolved_keys_; }
  const toml::array& resolved_values() const { return resolved_values_; }
  const std::string& file() const { return file_; }

 private:
  static std::string describe(const toml::node& n) {
    std::ostringstream os;
    n.visit([&os](const auto& v) {
      if constexpr (toml::is_string<decltype(v)>)
        os << '"' << v.get() << '"';
      else if constexpr (toml::is_table<decltype(v)>)
        os << "a table";
      else if constexpr (toml::is_array<decltype(v)>)
        os << "an array";
      else
        os << v;
    });
    return os.str();
  }
  template <class T>
  void record(const std::string& key, T&& value) {
    resolved_keys_.push_back(key);
    resolved_values_.push_back(std::forward<T>(value));
  }

  std::string file_;
  std::set<const toml::node*> used_;
  std::vector<std::string> resolved_keys_;
  toml::array resolved_values_;  ///< parallel to resolved_keys_
};

/// The [replay] section (config_replay.cpp): the spot-trace replay and its policies.
ReplayConfig read_replay(Reader& r, const toml::table& root);
/// The [replay] keys that name files, with their paths (`--dump` writes them absolute).
std::vector<std::pair<std::string, std::string>> replay_files(const ReplayConfig& c);

}  // namespace loom::config
