#include "app/sweep/study_file.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include "app/backends.hpp"
#include "app/study.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "schedulers/scheduler.hpp"

namespace loom::sweep {
namespace {

StudyLine line_of(const toml::node& n) {
  return n.source().begin.line;
}

[[noreturn]] void fail(const std::string& path, StudyLine line, const std::string& what) {
  throw InputError(path + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what);
}

std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  // Keep it a TOML float: "2" would read back as an integer.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

/// The `--set` text and CSV cell of a scalar or array value; nullopt for a table.
std::optional<AxisValue> to_value(const toml::node& n) {
  AxisValue v;
  v.line = line_of(n);
  if (const auto* i = n.as_integer()) {
    v.toml = v.cell = std::to_string(i->get());
  } else if (const auto* f = n.as_floating_point()) {
    v.toml = v.cell = shortest(f->get());
  } else if (const auto* b = n.as_boolean()) {
    v.toml = v.cell = b->get() ? "true" : "false";
  } else if (const auto* s = n.as_string()) {
    v.toml = quoted(s->get());
    v.cell = s->get();
  } else if (const auto* a = n.as_array()) {
    std::string toml, cell;
    for (const toml::node& e : *a) {
      const auto ev = to_value(e);
      if (!ev) return std::nullopt;
      toml += (toml.empty() ? "" : ", ") + ev->toml;
      cell += (cell.empty() ? "" : " ") + ev->cell;
    }
    v.toml = "[" + toml + "]";
    v.cell = "[" + cell + "]";
  } else {
    return std::nullopt;
  }
  return v;
}

double as_number(const std::string& path, const toml::node& n, const std::string& what) {
  if (const auto* i = n.as_integer()) return static_cast<double>(i->get());
  if (const auto* f = n.as_floating_point()) return f->get();
  fail(path, line_of(n), what + ": expected a number");
}

/// `{ start, stop, step }`: stop inclusive, step default 1; integers stay integers.
std::vector<AxisValue> range_values(const std::string& path, const std::string& key,
                                    const toml::table& t) {
  const std::string what = "axis '" + key + "' range";
  for (const auto& [k, node] : t) {
    if (k != "start" && k != "stop" && k != "step")
      fail(path, line_of(node),
           what + ": unknown key '" + std::string(k.str()) + "' (start, stop, step)");
  }
  const toml::node* start = t.get("start");
  const toml::node* stop = t.get("stop");
  if (!start || !stop) fail(path, line_of(t), what + ": needs start and stop");
  const toml::node* step = t.get("step");
  const bool integers = start->is_integer() && stop->is_integer() && (!step || step->is_integer());
  const double a = as_number(path, *start, what + " start");
  const double b = as_number(path, *stop, what + " stop");
  const double s = step ? as_number(path, *step, what + " step") : 1.0;
  if (!(s > 0) || !std::isfinite(s)) fail(path, line_of(t), what + ": step must be > 0");
  if (b < a) fail(path, line_of(t), what + ": stop < start gives an empty axis");
  const double n = std::floor((b - a) / s + 1e-9) + 1;
  if (n > 100000) fail(path, line_of(t), what + ": more than 100000 values");
  std::vector<AxisValue> out;
  for (int i = 0; i < n; ++i) {
    AxisValue v;
    v.line = line_of(t);
    if (integers) {
      v.toml = v.cell = std::to_string(static_cast<long long>(a) + i * static_cast<long long>(s));
    } else {
      v.toml = v.cell = shortest(a + i * s);
    }
    out.push_back(v);
  }
  return out;
}

AxisKey read_axis_key(const std::string& path, const std::string& key, const toml::node& n) {
  AxisKey k;
  k.key = key;
  k.line = line_of(n);
  if (const auto* t = n.as_table()) {
    k.values = range_values(path, key, *t);
  } else if (const auto* a = n.as_array()) {
    for (const toml::node& e : *a) {
      const auto v = to_value(e);
      if (!v) fail(path, line_of(e), "axis '" + key + "': values must be scalars or arrays");
      k.values.push_back(*v);
    }
  } else {
    fail(path, k.line, "axis '" + key + "': expected a list of values or { start, stop, step }");
  }
  if (k.values.empty()) fail(path, k.line, "axis '" + key + "' is empty");
  return k;
}

/// Flattens `[axes]`: quoted dotted keys and nested tables both name config keys; a table
/// holding `start` is a range, not a nested section.
void collect_axes(const std::string& path, const toml::table& t, const std::string& prefix,
                  std::vector<AxisKey>& out) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix + std::string(k.str());
    const auto* sub = node.as_table();
    if (sub && !sub->contains("start") && !sub->contains("stop")) {
      collect_axes(path, *sub, key + ".", out);
      continue;
    }
    out.push_back(read_axis_key(path, key, node));
  }
}

void by_line(std::vector<AxisKey>& keys) {
  std::stable_sort(keys.begin(), keys.end(),
                   [](const AxisKey& a, const AxisKey& b) { return a.line < b.line; });
}

void read_bases(StudyFile& s, const toml::table& root) {
  const toml::node* base = root.get("base");
  if (!base) fail(s.path, 1, "missing 'base' (the config file, or a list of them)");
  std::vector<const toml::node*> items;
  if (const auto* a = base->as_array()) {
    for (const toml::node& e : *a) items.push_back(&e);
  } else {
    items.push_back(base);
  }
  if (items.empty()) fail(s.path, line_of(*base), "'base' is empty");
  const std::filesystem::path dir = std::filesystem::path(s.path).parent_path();
  for (const toml::node* n : items) {
    if (!n->is_string()) fail(s.path, line_of(*n), "'base': expected a config path (string)");
    const std::string cell = *n->value<std::string>();
    const std::filesystem::path p =
        std::filesystem::path(cell).is_absolute() ? std::filesystem::path(cell) : dir / cell;
    if (!std::filesystem::is_regular_file(p))
      fail(s.path, line_of(*n), "'base': no config file '" + p.string() + "'");
    s.bases.push_back(p.lexically_normal().string());
    s.base_cells.push_back(cell);
  }
}

void read_schedulers(StudyFile& s, const toml::table& root) {
  const toml::node* n = root.get("schedulers");
  if (!n) return;
  s.schedulers_line = line_of(*n);
  if (n->is_string() && *n->value<std::string>() == "all") {
    for (const SchedulerInfo& info : scheduler_registry()) s.schedulers.emplace_back(info.name);
    return;
  }
  const auto* a = n->as_array();
  if (!a) fail(s.path, s.schedulers_line, "'schedulers': expected \"all\" or a list of names");
  for (const toml::node& e : *a) {
    if (!e.is_string()) fail(s.path, line_of(e), "'schedulers': expected scheduler names");
    const std::string name = *e.value<std::string>();
    try {
      find_scheduler(name);
    } catch (const InputError& err) {
      fail(s.path, line_of(e), std::string("'schedulers': ") + err.what());
    }
    s.schedulers.push_back(name);
  }
  if (s.schedulers.empty()) fail(s.path, s.schedulers_line, "'schedulers' is empty");
}

void read_seeds(StudyFile& s, const toml::table& root) {
  const toml::node* n = root.get("seeds");
  if (!n) return;
  const auto* a = n->as_array();
  if (!a || a->empty()) fail(s.path, line_of(*n), "'seeds': expected a non-empty list of integers");
  for (const toml::node& e : *a) {
    if (!e.is_integer() || *e.value<std::int64_t>() < 0)
      fail(s.path, line_of(e), "'seeds': expected non-negative integers");
    s.seeds.push_back(static_cast<int>(*e.value<std::int64_t>()));
  }
}

void read_axes(StudyFile& s, const toml::table& root) {
  if (const toml::node* n = root.get("axes")) {
    if (!n->is_table()) fail(s.path, line_of(*n), "'axes': expected a table");
    std::vector<AxisKey> keys;
    collect_axes(s.path, *n->as_table(), "", keys);
    by_line(keys);
    for (AxisKey& k : keys) s.axes.push_back(Axis{{std::move(k)}});
  }
  const toml::node* z = root.get("zip");
  if (!z) return;
  if (!z->is_array_of_tables()) fail(s.path, line_of(*z), "'zip': expected [[zip]] tables");
  for (const toml::node& g : *z->as_array()) {
    Axis axis;
    collect_axes(s.path, *g.as_table(), "", axis.keys);
    if (axis.keys.empty()) fail(s.path, line_of(g), "[[zip]] group is empty");
    by_line(axis.keys);
    for (const AxisKey& k : axis.keys) {
      if (k.values.size() != axis.keys.front().values.size()) {
        fail(s.path, k.line,
             "[[zip]] axis '" + k.key + "' has " + std::to_string(k.values.size()) +
                 " values but '" + axis.keys.front().key + "' has " +
                 std::to_string(axis.keys.front().values.size()) +
                 " (zipped keys advance together)");
      }
    }
    s.axes.push_back(std::move(axis));
  }
}

void check_duplicate_keys(const StudyFile& s) {
  std::set<std::string> seen;
  for (const Axis& a : s.axes) {
    for (const AxisKey& k : a.keys) {
      if (!seen.insert(k.key).second) fail(s.path, k.line, "axis '" + k.key + "' is given twice");
      if (k.key == "schedule.name" && !s.schedulers.empty())
        fail(s.path, k.line, "axis 'schedule.name' and 'schedulers' both set the scheduler");
      if (k.key == "workload.seed" && !s.seeds.empty())
        fail(s.path, k.line, "axis 'workload.seed' and 'seeds' both set the seed");
      if (k.key == "sim.backend") fail(s.path, k.line, "set the backend with 'backend'");
    }
  }
}

}  // namespace

StudyFile parse_study(const std::string& path) {
  StudyFile s;
  s.path = path;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail(path, e.source().begin.line, "TOML syntax error: " + std::string(e.description()));
  }
  static const std::set<std::string> kKnown = {"base", "schedulers", "seeds", "backend",
                                               "set",  "axes",       "zip"};
  for (const auto& [k, node] : root) {
    if (!kKnown.count(std::string(k.str())))
      fail(path, line_of(node),
           "unknown study key '" + std::string(k.str()) +
               "' (base, schedulers, seeds, backend, set, axes, zip)");
  }
  read_bases(s, root);
  read_schedulers(s, root);
  read_seeds(s, root);
  if (const toml::node* b = root.get("backend")) {
    const auto v = b->value<std::string>();
    const std::vector<std::string> names = backend_names();
    if (!v || std::find(names.begin(), names.end(), *v) == names.end())
      fail(path, line_of(*b), "'backend': expected " + backend_name_list(true));
    s.backend = *v;
  }
  if (const toml::node* set = root.get("set")) {
    if (!set->is_table()) fail(path, line_of(*set), "'set': expected a table of config keys");
    std::vector<AxisKey> keys;
    for (const auto& [k, node] : *set->as_table()) {
      // A fixed override is a one-value axis that makes no column.
      const auto v = node.is_table() ? std::nullopt : to_value(node);
      if (!v) fail(path, line_of(node), "[set] '" + std::string(k.str()) + "': expected a value");
      s.fixed.push_back(std::string(k.str()) + "=" + v->toml);
    }
  }
  read_axes(s, root);
  check_duplicate_keys(s);
  return s;
}

std::vector<std::string> axis_columns(const StudyFile& study) {
  std::vector<std::string> cols = {"config"};
  for (const Axis& a : study.axes)
    for (const AxisKey& k : a.keys) cols.push_back(k.key);
  cols.push_back("scheduler");
  if (!study.seeds.empty()) cols.push_back("seed");
  return cols;
}

std::vector<Point> expand(const StudyFile& study) {
  const size_t schedulers = std::max<size_t>(1, study.schedulers.size());
  const size_t seeds = std::max<size_t>(1, study.seeds.size());
  size_t total = study.bases.size() * schedulers * seeds;
  for (const Axis& a : study.axes) total *= a.size();
  std::vector<Point> points;
  points.reserve(total);
  for (size_t index = 0; index < total; ++index) {
    // Mixed-radix digits of `index`, innermost (seeds) last.
    size_t rest = index;
    const size_t seed = rest % seeds;
    rest /= seeds;
    const size_t scheduler = rest % schedulers;
    rest /= schedulers;
    std::vector<size_t> digits(study.axes.size());
    for (size_t a = study.axes.size(); a-- > 0;) {
      digits[a] = rest % study.axes[a].size();
      rest /= study.axes[a].size();
    }
    Point p;
    p.index = index;
    p.base = rest;
    p.overrides = study.fixed;
    p.cells.push_back(study.base_cells[p.base]);
    for (size_t a = 0; a < study.axes.size(); ++a) {
      for (const AxisKey& k : study.axes[a].keys) {
        p.overrides.push_back(k.key + "=" + k.values[digits[a]].toml);
        p.cells.push_back(k.values[digits[a]].cell);
      }
    }
    if (!study.schedulers.empty()) {
      p.overrides.push_back("schedule.name=" + quoted(study.schedulers[scheduler]));
      p.cells.push_back(study.schedulers[scheduler]);
    } else {
      p.cells.emplace_back();  // filled from the resolved config
    }
    if (!study.seeds.empty()) {
      p.overrides.push_back("workload.seed=" + std::to_string(study.seeds[seed]));
      p.cells.push_back(std::to_string(study.seeds[seed]));
    }
    p.overrides.push_back("sim.backend=\"" + study.backend + "\"");
    points.push_back(std::move(p));
  }
  return points;
}

void check_axes(const StudyFile& study) {
  for (const std::string& base : study.bases) {
    try {
      load_study_config(base, study.fixed);
    } catch (const InputError& e) {
      fail(study.path, 0, std::string("[set]: ") + e.what());
    }
    for (const Axis& a : study.axes) {
      for (const AxisKey& k : a.keys) {
        for (const AxisValue& v : k.values) {
          std::vector<std::string> overrides = study.fixed;
          overrides.push_back(k.key + "=" + v.toml);
          try {
            load_study_config(base, overrides);
          } catch (const InputError& e) {
            fail(study.path, v.line, "axis '" + k.key + "' = " + v.cell + ": " + e.what());
          }
        }
      }
    }
  }
}

}  // namespace loom::sweep
