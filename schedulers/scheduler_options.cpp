#include "schedulers/scheduler_options.hpp"

#include <cmath>
#include <set>

#include "core/errors.hpp"
#include "core/spelling.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {
namespace {

std::string number_text(double v) {
  std::string t = std::to_string(v);
  t.erase(t.find_last_not_of('0') + 1);
  if (t.back() == '.') t.pop_back();
  return t;
}

std::string written(const OptionValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return number_text(x);
        else if constexpr (std::is_same_v<T, std::string>)
          return "\"" + x + "\"";
        else
          return integer_list_text(x);
      },
      v.value);
}

[[noreturn]] void bad_value(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  throw InputError(v.origin + ": key '" + key + "': expected " + spec.type_text() + ", got " +
                   written(v));
}

std::vector<std::string> names(const std::vector<OptionSpec>& specs) {
  std::vector<std::string> out;
  for (const OptionSpec& s : specs) out.push_back(s.key);
  return out;
}

std::vector<std::string> scheduler_names() {
  std::vector<std::string> out;
  for (const SchedulerInfo& info : scheduler_registry()) out.emplace_back(info.name);
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

/// Checks one value against every type the declaration allows (by reading it as the
/// struct will).
void check_value(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  switch (spec.kind) {
    case OptionKind::kInteger:
      checked_integer(spec, v, key);
      break;
    case OptionKind::kIntegerOrAuto:
      checked_integer_or_auto(spec, v, key);
      break;
    case OptionKind::kNumber:
      checked_number(spec, v, key);
      break;
    case OptionKind::kBoolean:
      checked_boolean(spec, v, key);
      break;
    case OptionKind::kChoice:
      checked_choice(spec, v, key);
      break;
    case OptionKind::kIntegerList:
      checked_integer_list(spec, v, key);
      break;
  }
}

}  // namespace

std::string OptionType<double>::text(double v) {
  return number_text(v);
}

std::string OptionSpec::type_text() const {
  switch (kind) {
    case OptionKind::kInteger:
      return "an integer >= " + number_text(limits.min);
    case OptionKind::kIntegerOrAuto:
      return "\"auto\" or an integer >= " + number_text(limits.min);
    case OptionKind::kNumber:
      return "a number >= " + number_text(limits.min);
    case OptionKind::kBoolean:
      return "true or false";
    case OptionKind::kChoice: {
      std::string t;
      for (const std::string& c : limits.choices) t += (t.empty() ? "" : " | ") + ("\"" + c + "\"");
      return "one of " + t;
    }
    case OptionKind::kIntegerList:
      return "an array of integers >= " + number_text(limits.min);
  }
  return "";
}

std::int64_t checked_integer(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  const auto* x = std::get_if<std::int64_t>(&v.value);
  if (!x || *x < spec.limits.min || *x > 1'000'000'000) bad_value(spec, v, key);
  return *x;
}

std::optional<int> checked_integer_or_auto(const OptionSpec& spec, const OptionValue& v,
                                           const std::string& key) {
  if (const auto* word = std::get_if<std::string>(&v.value); word && *word == "auto")
    return std::nullopt;
  return static_cast<int>(checked_integer(spec, v, key));
}

double checked_number(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  double x = 0;
  if (const auto* i = std::get_if<std::int64_t>(&v.value))
    x = static_cast<double>(*i);
  else if (const auto* d = std::get_if<double>(&v.value))
    x = *d;
  else
    bad_value(spec, v, key);
  if (!std::isfinite(x) || x < spec.limits.min) bad_value(spec, v, key);
  return x;
}

bool checked_boolean(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  const auto* x = std::get_if<bool>(&v.value);
  if (!x) bad_value(spec, v, key);
  return *x;
}

std::string checked_choice(const OptionSpec& spec, const OptionValue& v, const std::string& key) {
  const auto* x = std::get_if<std::string>(&v.value);
  if (!x) bad_value(spec, v, key);
  for (const std::string& c : spec.limits.choices)
    if (*x == c) return *x;
  throw InputError(v.origin + ": key '" + key + "': '" + *x + "' is not " + spec.type_text() +
                   did_you_mean(*x, spec.limits.choices));
}

std::vector<int> checked_integer_list(const OptionSpec& spec, const OptionValue& v,
                                      const std::string& key) {
  const auto* x = std::get_if<std::vector<std::int64_t>>(&v.value);
  if (!x) bad_value(spec, v, key);
  std::vector<int> out;
  for (std::int64_t e : *x) {
    if (e < spec.limits.min || e > 1'000'000'000) bad_value(spec, v, key);
    out.push_back(static_cast<int>(e));
  }
  return out;
}

const OptionValue* find_option(const ScheduleConfig& schedule, const std::string& scheduler,
                               const OptionSpec& spec, std::string& key) {
  if (const auto table = schedule.options.find(scheduler); table != schedule.options.end()) {
    if (const auto v = table->second.find(spec.key); v != table->second.end()) {
      key = "schedule." + scheduler + "." + spec.key;
      return &v->second;
    }
  }
  if (const auto v = schedule.flat_options.find(spec.legacy_key());
      v != schedule.flat_options.end()) {
    key = "schedule." + spec.legacy_key();
    return &v->second;
  }
  return nullptr;
}

void set_option(ScheduleConfig& schedule, const std::string& scheduler, const std::string& key,
                OptionValue::Value value) {
  schedule.options[scheduler][key] =
      OptionValue{.value = std::move(value), .origin = "(set by code)"};
}

int selected_integer_option(const ScheduleConfig& schedule, const std::string& key, int fallback) {
  for (const OptionSpec& spec : find_scheduler(schedule.name).option_specs()) {
    if (spec.key != key || spec.kind != OptionKind::kInteger) continue;
    std::string written_as;
    const OptionValue* v = find_option(schedule, schedule.name, spec, written_as);
    return v ? static_cast<int>(checked_integer(spec, *v, written_as))
             : std::stoi(spec.default_text);
  }
  return fallback;
}

std::vector<std::string> check_scheduler_options(const ScheduleConfig& schedule) {
  for (const auto& [scheduler, table] : schedule.options) {
    const SchedulerInfo* info = nullptr;
    for (const SchedulerInfo& s : scheduler_registry())
      if (scheduler == s.name) info = &s;
    const std::string origin = table.empty() ? "" : table.begin()->second.origin + ": ";
    if (!info)
      throw InputError(origin + "table [schedule." + scheduler + "]: no scheduler is named '" +
                       scheduler + "'" + did_you_mean(scheduler, scheduler_names()) +
                       "; `loom schedulers` lists them");
    const std::vector<OptionSpec> specs = info->option_specs();
    for (const auto& [key, value] : table) {
      const std::string full = "schedule." + scheduler + "." + key;
      const OptionSpec* spec = nullptr;
      for (const OptionSpec& s : specs)
        if (s.key == key) spec = &s;
      if (!spec)
        throw InputError(value.origin + ": key '" + full + "': " + scheduler +
                         (specs.empty()
                              ? " takes no options"
                              : " has no option '" + key + "'" + did_you_mean(key, names(specs)) +
                                    " (its options: " + joined(names(specs)) + ")") +
                         "; `loom schedulers " + scheduler + "` lists them");
      check_value(*spec, value, full);
    }
  }

  std::vector<std::string> warnings;
  for (const auto& [key, value] : schedule.flat_options) {
    std::vector<std::string> owners;
    std::vector<std::string> every_legacy_key = {"name", "microbatches", "microbatch_size",
                                                 "partition_view", "stage_layers"};
    bool selected_takes_it = false;
    for (const SchedulerInfo& info : scheduler_registry()) {
      for (const OptionSpec& spec : info.option_specs()) {
        every_legacy_key.push_back(spec.legacy_key());
        if (spec.legacy_key() != key) continue;
        check_value(spec, value, "schedule." + key);
        owners.push_back("[schedule." + std::string(info.name) + "] " + spec.key + " = " +
                         written(value));
        selected_takes_it = selected_takes_it || schedule.name == info.name;
      }
    }
    if (owners.empty())
      throw InputError(value.origin + ": key 'schedule." + key + "': unknown key" +
                       did_you_mean(key, every_legacy_key) +
                       "; a scheduler's own options go under [schedule.<scheduler>] "
                       "(`loom schedulers NAME` lists them)");
    warnings.push_back(value.origin + ": schedule." + key +
                       " is deprecated and read for one more release; write " + joined(owners) +
                       (selected_takes_it ? ""
                                          : " (schedule.name = \"" + schedule.name +
                                                "\" has no such option: ignored)"));
  }
  // The selected scheduler run in a form that makes it another one (its default included).
  for (const SchedulerInfo& info : scheduler_registry()) {
    if (schedule.name != info.name) continue;
    for (const OptionSpec& spec : info.option_specs()) {
      if (!spec.limits.degenerate_at) continue;
      std::string key = "schedule." + schedule.name + "." + spec.key;
      const OptionValue* v = find_option(schedule, schedule.name, spec, key);
      const std::int64_t value = v ? checked_integer(spec, *v, key) : std::stoll(spec.default_text);
      if (value == *spec.limits.degenerate_at)
        warnings.push_back(key + " = " + std::to_string(value) + (v ? "" : " (the default)") +
                           ": " + spec.limits.degenerate_note);
    }
  }
  return warnings;
}

}  // namespace loom
