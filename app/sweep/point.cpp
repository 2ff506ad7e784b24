#include "app/sweep/point.hpp"

#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "app/backends.hpp"
#include "app/study.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/link_load.hpp"
#include "core/timeline.hpp"

namespace loom::sweep {

std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

namespace {

void fnv1a(std::uint64_t& h, std::string_view bytes) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
}

}  // namespace

Resolved resolve(const std::string& config, const std::vector<std::string>& overrides) {
  const Config c = load_study_config(config, overrides);
  // The dump's first line names the file; the hash covers the values only.
  const std::string& text = c.resolved_toml;
  const size_t body = text.find('\n');
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  fnv1a(h, std::string_view(text).substr(body == std::string::npos ? 0 : body + 1));
  // Files the config names are part of what a point computes: an edited workload CSV or
  // profile reruns its points under --resume.
  for (const std::string& file : {c.workload.csv, c.cost.profile}) {
    if (file.empty()) continue;
    std::ifstream in(file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    fnv1a(h, ss.str());
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, h);
  return {hex, c.schedule.name};
}

namespace {

PointResult measure(const Study& study, const std::string& timeline_csv) {
  const Timeline timeline = simulate(study).timeline;
  const Metrics m = study_metrics(study, timeline);
  if (!timeline_csv.empty()) write_timeline_csv(timeline_csv, study.schedule, timeline);
  double peak_max = 0, peak_sum = 0;
  for (const RankMetrics& r : m.per_rank) {
    peak_max = std::max(peak_max, r.peak_memory_bytes);
    peak_sum += r.peak_memory_bytes;
  }
  PointResult out;
  out.status = "ok";
  out.iteration_time_s = number_text(m.iteration_time_s);
  out.throughput_samples_per_s = number_text(m.throughput_samples_per_s);
  out.bubble_fraction = number_text(m.bubble_fraction);
  out.peak_memory_max_bytes = number_text(peak_max);
  out.peak_memory_mean_bytes =
      number_text(m.per_rank.empty() ? 0 : peak_sum / static_cast<double>(m.per_rank.size()));
  const TrainingRates rates = study_rates(study, m.iteration_time_s);
  out.tflops_per_gpu = number_text(rates.tflops_per_gpu);
  out.mfu = number_text(rates.mfu);
  out.tokens_per_s_per_gpu = number_text(rates.tokens_per_s_per_gpu);
  const TierLoad* busiest = nullptr;
  const std::vector<TierLoad> tiers =
      tier_loads(study.schedule, study.config.cluster, m.iteration_time_s);
  for (const TierLoad& t : tiers) {
    if (t.tier != LinkTier::kGpu &&
        (!busiest || t.busiest_utilisation > busiest->busiest_utilisation))
      busiest = &t;
  }
  if (busiest) {
    out.busiest_link_utilisation = number_text(busiest->busiest_utilisation);
    out.busiest_link_tier = to_string(busiest->tier);
  }
  return out;
}

PointResult failure(const std::string& status, const std::string& reason) {
  PointResult out;
  out.status = status;
  out.reason = reason;
  return out;
}

}  // namespace

namespace {

PointResult run_point_untimed(const std::string& config, const std::vector<std::string>& overrides,
                              const std::string& timeline_csv) {
  try {
    return measure(*prepare_study(config, overrides, Folding::kAllowed), timeline_csv);
  } catch (const InputError& e) {
    return failure("failed", e.what());
  } catch (const InfeasibleError& e) {
    return failure("infeasible", e.what());
  } catch (const std::exception& e) {
    return failure("failed", std::string("internal error: ") + e.what());
  }
}

}  // namespace

PointResult run_point(const std::string& config, const std::vector<std::string>& overrides,
                      const std::string& timeline_csv) {
  const auto start = std::chrono::steady_clock::now();
  PointResult r = run_point_untimed(config, overrides, timeline_csv);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string to_message(const PointResult& r) {
  const nlohmann::json j = {{"status", r.status},
                            {"iteration_time_s", r.iteration_time_s},
                            {"throughput_samples_per_s", r.throughput_samples_per_s},
                            {"bubble_fraction", r.bubble_fraction},
                            {"peak_memory_max_bytes", r.peak_memory_max_bytes},
                            {"peak_memory_mean_bytes", r.peak_memory_mean_bytes},
                            {"tflops_per_gpu", r.tflops_per_gpu},
                            {"mfu", r.mfu},
                            {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
                            {"busiest_link_utilisation", r.busiest_link_utilisation},
                            {"busiest_link_tier", r.busiest_link_tier},
                            {"reason", r.reason},
                            {"wall_s", r.wall_s}};
  // Invalid UTF-8 in a message must not turn a result into an exception.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

PointResult from_message(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  PointResult r;
  r.status = j.at("status");
  r.iteration_time_s = j.at("iteration_time_s");
  r.throughput_samples_per_s = j.at("throughput_samples_per_s");
  r.bubble_fraction = j.at("bubble_fraction");
  r.peak_memory_max_bytes = j.at("peak_memory_max_bytes");
  r.peak_memory_mean_bytes = j.at("peak_memory_mean_bytes");
  r.tflops_per_gpu = j.at("tflops_per_gpu");
  r.mfu = j.at("mfu");
  r.tokens_per_s_per_gpu = j.at("tokens_per_s_per_gpu");
  r.busiest_link_utilisation = j.at("busiest_link_utilisation");
  r.busiest_link_tier = j.at("busiest_link_tier");
  r.reason = j.at("reason");
  r.wall_s = j.at("wall_s");
  return r;
}

}  // namespace loom::sweep
