#include "core/timeline.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/io.hpp"
#include "core/overloaded.hpp"
#include "core/trace_counters.hpp"

namespace loom {
namespace {

/// Identifies one forward's activations: (stage, microbatch, module).
using ActivationKey = std::tuple<StageId, MicrobatchId, ModuleId>;

ActivationKey key_of(const Compute& c) {
  return {c.stage, c.microbatch, c.module};
}

/// Keys of the forwards whose activations some backward on this rank releases: only those
/// stay alive after their forward (a segment with no backward keeps nothing).
std::map<ActivationKey, bool> released_keys(const std::vector<Op>& program) {
  std::map<ActivationKey, bool> keys;
  for (const Op& op : program) {
    if (const auto* c = std::get_if<Compute>(&op); c && c->releases_activation)
      keys[key_of(*c)] = true;
  }
  return keys;
}

/// A number in fixed notation with `digits` decimals, exactly as printf's "%.<digits>f"
/// (so reruns are byte-identical) but through std::to_chars: printf was most of the time
/// of writing a 4,096-GPU timeline.
struct Fixed {
  double value;
  int digits;
  /// The text, in a buffer of its own.
  struct Text {
    char buf[400];  // %.9f of the largest double is 309 + 10 characters
    std::size_t size;
    std::string_view view() const { return {buf, size}; }
  };
  Text text() const {
    Text t;
    t.size = static_cast<std::size_t>(
        std::to_chars(t.buf, t.buf + sizeof t.buf, value, std::chars_format::fixed, digits).ptr -
        t.buf);
    return t;
  }
  friend std::ostream& operator<<(std::ostream& out, const Fixed& f) {
    const Text t = f.text();
    return out.write(t.buf, static_cast<std::streamsize>(t.size));
  }
};

/// Appends a JSON string's contents: quotes and backslashes escaped, control characters
/// dropped.
void append_json_escaped(std::string& out, std::string_view text) {
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
}

std::string json_escape(const std::string& text) {
  std::string out;
  append_json_escaped(out, text);
  return out;
}

/// Text built in memory and written in large blocks: a trace event is a dozen fields, and
/// an ostream insertion per field (a sentry each) was most of the time of writing the 2 GB
/// trace of an unfolded 16,384-GPU run.
class BlockWriter {
 public:
  explicit BlockWriter(std::ostream& out) : out_(out) { text_.reserve(kBlock + 4096); }
  ~BlockWriter() { flush(); }
  BlockWriter(const BlockWriter&) = delete;
  BlockWriter& operator=(const BlockWriter&) = delete;

  BlockWriter& operator<<(std::string_view text) {
    text_.append(text);
    return *this;
  }
  BlockWriter& operator<<(char ch) {
    text_.push_back(ch);
    return *this;
  }
  template <class Int>
  requires std::is_integral_v<Int> BlockWriter& operator<<(Int value) {
    append_decimal(text_, value);
    return *this;
  }
  template <class Tag>
  BlockWriter& operator<<(Id<Tag> id) {
    return *this << id.value();
  }
  /// `digits` decimals, as Fixed writes them.
  BlockWriter& fixed(double value, int digits) {
    text_.append(Fixed{value, digits}.text().view());
    return *this;
  }
  /// A JSON string's contents, as json_escape writes them.
  BlockWriter& escaped(std::string_view text) {
    append_json_escaped(text_, text);
    return *this;
  }
  /// Ends an entry: writes the block out once it is large.
  void end_entry() {
    if (text_.size() >= kBlock) flush();
  }
  void flush() {
    out_.write(text_.data(), static_cast<std::streamsize>(text_.size()));
    text_.clear();
  }

 private:
  static constexpr size_t kBlock = 1 << 20;
  std::ostream& out_;
  std::string text_;
};

const std::string& module_name(const Schedule& schedule, const Op& op) {
  return schedule.module_names.at(op_module(op));
}

}  // namespace

double Timeline::iteration_time_s() const {
  double end = 0;
  for (const auto& rank : timings) {
    for (const OpTiming& t : rank) end = std::max(end, t.end_s);
  }
  return end;
}

PerRank<ActivationPeak> activation_peaks(const Schedule& schedule) {
  PerRank<ActivationPeak> peaks(schedule.num_ranks());
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    const auto retained = released_keys(program);
    std::map<std::pair<StageId, MicrobatchId>, int>
        live_segments;  // (stage, microbatch) -> segments
    std::map<ActivationKey, double> live_bytes;
    double bytes = 0;
    ActivationPeak& peak = peaks[r];
    for (const Op& op : program) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      const ActivationKey key = key_of(*c);
      if (c->pass == Pass::kF && retained.count(key)) {
        bytes += c->activation_bytes;
        // A key counts once however many computes add to it (a successor copy shares
        // its stage's key and is released with it).
        if (!live_bytes.count(key)) ++live_segments[{c->stage, c->microbatch}];
        live_bytes[key] += c->activation_bytes;
        peak.bytes = std::max(peak.bytes, bytes);
        peak.microbatches = std::max(peak.microbatches, isize(live_segments));
      } else if (c->releases_activation) {
        bytes -= live_bytes[key];
        live_bytes.erase(key);
        auto it = live_segments.find({c->stage, c->microbatch});
        if (it != live_segments.end() && --it->second == 0) live_segments.erase(it);
      }
    }
  }
  return peaks;
}

Metrics compute_metrics(const Schedule& schedule, const Timeline& timeline) {
  Metrics m;
  m.iteration_time_s = timeline.iteration_time_s();
  int samples = 0;
  for (const auto& replica : schedule.samples) {
    for (const auto& mb : replica) samples += isize(mb);
  }
  samples *= schedule.replica_fold;  // the replicas folded away train too
  m.throughput_samples_per_s = m.iteration_time_s > 0 ? samples / m.iteration_time_s : 0.0;
  const auto peaks = activation_peaks(schedule);
  double busy_total = 0;
  for (const RankId r : schedule.rank_ids()) {
    RankMetrics rm;
    rm.rank = r;
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      if (occupies_rank(program[i])) {
        const OpTiming& t = timeline.timings[r][i];
        rm.busy_s += t.end_s - t.start_s;
      }
    }
    rm.peak_memory_bytes = schedule.static_memory[r].total() + peaks[r].bytes;
    rm.peak_live_microbatches = peaks[r].microbatches;
    busy_total += rm.busy_s;
    m.per_rank.push_back(rm);
  }
  const double capacity = schedule.num_ranks() * m.iteration_time_s;
  m.bubble_fraction = capacity > 0 ? 1.0 - busy_total / capacity : 0.0;
  return m;
}

std::vector<MemorySample> memory_over_time(const Schedule& schedule, const Timeline& timeline) {
  std::vector<MemorySample> rows;
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    const auto retained = released_keys(program);
    const StaticMemory& fixed = schedule.static_memory[r];
    // (time, delta) changes; stable sort keeps program order among equal times.
    std::vector<std::pair<double, double>> changes;
    std::map<ActivationKey, double> live;
    for (size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (!c) continue;
      const OpTiming& t = timeline.timings[r][i];
      if (c->pass == Pass::kF && retained.count(key_of(*c))) {
        changes.emplace_back(t.start_s, c->activation_bytes);
        live[key_of(*c)] += c->activation_bytes;
      } else if (c->releases_activation) {
        changes.emplace_back(t.end_s, -live[key_of(*c)]);
        live.erase(key_of(*c));
      }
    }
    std::stable_sort(changes.begin(), changes.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    MemorySample row{r, 0.0, fixed.parameters, fixed.gradients, fixed.optimizer, 0.0};
    rows.push_back(row);
    for (size_t k = 0; k < changes.size(); ++k) {
      row.time_s = changes[k].first;
      row.activations += changes[k].second;
      const bool last_at_this_time = k + 1 == changes.size() || changes[k + 1].first != row.time_s;
      if (!last_at_this_time) continue;
      row.activations = std::max(0.0, row.activations);
      if (rows.back().rank == r && rows.back().time_s == row.time_s)
        rows.back() = row;
      else
        rows.push_back(row);
    }
  }
  return rows;
}

void write_timeline_csv(const std::string& path, const Schedule& schedule,
                        const Timeline& timeline) {
  std::ofstream out = open_for_write(path);
  write_timeline_csv(out, schedule, timeline);
  finish_write(out, path);
}

void write_timeline_csv(std::ostream& out, const Schedule& schedule, const Timeline& timeline) {
  BlockWriter text(out);
  text << "rank,kind,module,stage,microbatch,start_s,end_s\n";
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const Op& op = program[i];
      const OpTiming& t = timeline.timings[r][i];
      text << r << ',' << op_kind_name(op) << ',' << module_name(schedule, op) << ','
           << op_stage(op) << ',';
      if (const auto mb = op_microbatch(op)) text << *mb;
      (text << ',').fixed(t.start_s, 9) << ',';
      text.fixed(t.end_s, 9) << '\n';
      text.end_entry();
    }
  }
}

/// The thread of each op in the Chrome trace. Perfetto drops X events that overlap on one
/// thread, so: compute on tid 0; receives and blocking collectives (the rank waits, one at
/// a time) on tid 1; async collectives (gradient buckets, one at a time on the rank's
/// communication stream) on tid 2 where the rank has any; eager sends, which overlap each
/// other, on the first of the next tids that is free at their start (greedy interval
/// colouring, deterministic).
namespace {
/// A thread of a rank's eager sends in the trace: sends that overlap take different lanes.
LOOM_DECLARE_ID(SendLane, PerSendLane);

bool is_async(const Op& op) {
  const auto* c = std::get_if<Collective>(&op);
  return c && c->async;
}

/// The first tid of rank r's eager sends: 3 behind a gradient-bucket lane, else 2.
int first_send_tid(const std::vector<Op>& program) {
  return std::any_of(program.begin(), program.end(), is_async) ? 3 : 2;
}

PerRank<std::vector<int>> trace_threads(const Schedule& schedule, const Timeline& timeline) {
  PerRank<std::vector<int>> tids(schedule.num_ranks());
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    const int sends = first_send_tid(program);
    PerSendLane<std::int64_t> lane_free_ns;  // when each lane's last send ends
    for (size_t i = 0; i < program.size(); ++i) {
      int tid = occupies_rank(program[i]) ? 0 : is_async(program[i]) ? 2 : 1;
      if (std::holds_alternative<Send>(program[i])) {
        const OpTiming& t = timeline.timings[r][i];
        const std::int64_t start = std::llround(t.start_s * 1e9), end = std::llround(t.end_s * 1e9);
        SendLane lane{0};
        while (lane_free_ns.contains(lane) && lane_free_ns[lane] > start) ++lane;
        if (lane == lane_free_ns.next_id())
          lane_free_ns.push_back(end);
        else
          lane_free_ns[lane] = end;
        tid = sends + lane.value();
      }
      tids[r].push_back(tid);
    }
  }
  return tids;
}
}  // namespace

void write_chrome_trace(const std::string& path, const Schedule& schedule,
                        const Timeline& timeline) {
  write_chrome_trace(path, schedule, timeline, {}, "");
}

void write_chrome_trace(const std::string& path, const Schedule& schedule, const Timeline& timeline,
                        const std::vector<CounterTrack>& counters,
                        const std::string& counters_process) {
  // Chrome Trace Event format: one process per rank; its threads are given by
  // trace_threads(). Times are whole nanoseconds, and a duration is the difference of the
  // rounded ends, so back-to-back ops never overlap by a rounding error.
  const auto tids = trace_threads(schedule, timeline);
  std::ofstream out = open_for_write(path);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&]() -> std::ofstream& {
    if (!first) out << ",\n";
    first = false;
    return out;
  };
  for (const RankId r : schedule.rank_ids()) {
    const RankInfo& info = schedule.ranks[r];
    sep() << "{\"ph\":\"M\",\"pid\":" << r
          << ",\"name\":\"process_name\",\"args\":{\"name\":\"rank " << r << " (gpu " << info.gpu;
    if (info.tp > 1) out << "-" << info.gpu + info.tp - 1;
    out << ", replica " << info.replica << ")\"}}";
    sep() << "{\"ph\":\"M\",\"pid\":" << r
          << ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" << r << "}}";
    const int rank_max_tid =
        tids[r].empty() ? 1 : std::max(1, *std::max_element(tids[r].begin(), tids[r].end()));
    const int sends = first_send_tid(schedule.programs[r]);
    for (int tid = 0; tid <= rank_max_tid; ++tid) {
      const std::string name = tid == 0      ? "compute"
                               : tid == 1    ? "recv / collective"
                               : tid < sends ? "gradient buckets"
                                             : "send " + std::to_string(tid - sends);
      sep() << "{\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << tid
            << ",\"name\":\"thread_name\",\"args\":{\"name\":\"" << name << "\"}}";
    }
  }
  {
    BlockWriter text(out);
    for (const RankId r : schedule.rank_ids()) {
      const auto& program = schedule.programs[r];
      const ReplicaId replica = schedule.ranks[r].replica;
      for (size_t i = 0; i < program.size(); ++i) {
        const Op& op = program[i];
        const OpTiming& t = timeline.timings[r][i];
        const auto mb = op_microbatch(op);
        const std::int64_t start_ns = std::llround(t.start_s * 1e9),
                           end_ns = std::llround(t.end_s * 1e9);
        if (!first) text << ",\n";
        first = false;
        (text << "{\"ph\":\"X\",\"pid\":" << r << ",\"tid\":" << tids[r][i] << ",\"name\":\"")
                .escaped(to_string(op, schedule))
            << "\",\"cat\":\"" << op_kind_name(op) << "\",\"ts\":";
        (text.fixed(static_cast<double>(start_ns) / 1e3, 3) << ",\"dur\":")
                .fixed(static_cast<double>(end_ns - start_ns) / 1e3, 3)
            << ",\"args\":{\"stage\":" << op_stage(op) << ",\"module\":\"";
        text.escaped(module_name(schedule, op)) << '"';
        if (const auto* c = std::get_if<Compute>(&op); c && c->pass == Pass::kB) {
          (text << ",\"input_grad_s\":").fixed(c->seconds - c->weight_grad_s, 9)
              << ",\"weight_grad_s\":";
          text.fixed(c->weight_grad_s, 9);
        }
        if (const auto* send = std::get_if<Send>(&op))
          (text << ",\"bytes\":").fixed(send->bytes, 0);
        if (const auto* c = std::get_if<Collective>(&op))
          (text << ",\"bytes\":").fixed(c->bytes, 0);
        if (mb) {
          text << ",\"microbatch\":" << *mb << ",\"samples\":[";
          const auto& samples = schedule.samples_of(replica, *mb);
          for (size_t k = 0; k < samples.size(); ++k) (k ? text << ',' : text) << samples[k];
          text << ']';
        }
        text << "}}";
        text.end_entry();
      }
    }
  }
  if (!counters.empty()) {
    const int pid = schedule.num_ranks();
    sep() << "{\"ph\":\"M\",\"pid\":" << pid << ",\"name\":\"process_name\",\"args\":{\"name\":\""
          << json_escape(counters_process) << "\"}}";
    sep() << "{\"ph\":\"M\",\"pid\":" << pid
          << ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":" << pid << "}}";
    for (const CounterTrack& track : counters) {
      for (const auto& [time_s, value] : track.points) {
        sep() << "{\"ph\":\"C\",\"pid\":" << pid << ",\"name\":\"" << json_escape(track.name)
              << "\",\"ts\":" << Fixed{static_cast<double>(std::llround(time_s * 1e9)) / 1e3, 3}
              << ",\"args\":{\"" << json_escape(track.unit) << "\":" << Fixed{value, 6} << "}}";
      }
    }
  }
  out << "\n]}\n";
  finish_write(out, path);
}

void write_memory_csv(const std::string& path, const std::vector<MemorySample>& samples) {
  std::ofstream out = open_for_write(path);
  write_memory_csv(out, samples);
  finish_write(out, path);
}

void write_memory_csv(std::ostream& out, const std::vector<MemorySample>& samples) {
  out << "rank,time_s,parameters_bytes,gradients_bytes,optimizer_bytes,activations_bytes,"
         "total_bytes\n";
  for (const MemorySample& s : samples) {
    const double total = s.parameters + s.gradients + s.optimizer + s.activations;
    out << s.rank << ',' << Fixed{s.time_s, 9} << ',' << Fixed{s.parameters, 0} << ','
        << Fixed{s.gradients, 0} << ',' << Fixed{s.optimizer, 0} << ',' << Fixed{s.activations, 0}
        << ',' << Fixed{total, 0} << '\n';
  }
}

}  // namespace loom
