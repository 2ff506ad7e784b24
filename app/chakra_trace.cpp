// Chakra execution traces of a schedule and back (app/chakra_trace.hpp), on the protobuf
// classes protoc generates from app/chakra/et_def.proto. One rule derives a node's Chakra
// fields from its op (node_facts): export writes them, import holds the file to them.
#include "app/chakra_trace.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>

#include <charconv>
#include <cmath>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "app/chakra/et_def.pb.h"
#include "core/errors.hpp"
#include "core/io.hpp"
#include "core/matching.hpp"
#include "core/model_flops.hpp"
#include "core/overloaded.hpp"
#include "core/schedule_text.hpp"

namespace loom {
namespace {

namespace chakra = ChakraProtoMsg;
using NodeId = std::uint64_t;

constexpr const char* kSchemaVersion = "0.0.4";  // et_def.proto's, at the commit it cites
constexpr const char* kPrefix = "loom";
constexpr const char* kOpAttr = "loom_op";
constexpr const char* kHeaderAttr = "loom_schedule";
constexpr const char* kRankAttr = "loom_rank";

/// What a node says in Chakra's own fields, as its op gives them.
struct NodeFacts {
  chakra::NodeType type = chakra::INVALID_NODE;
  std::vector<NodeId> data_deps;  ///< every dependency (see the header)
  std::uint64_t duration_micros = 0;
  std::vector<std::pair<std::string, std::int64_t>> ints;  ///< comm_src, comm_tag, ...
  std::string pg_name;                                     ///< collectives only
};

/// Whether an op holds its rank until it ends (core/schedule.hpp): all but a send and an
/// async collective.
bool holds_rank(const Op& op) {
  if (std::holds_alternative<Send>(op)) return false;
  if (const auto* c = std::get_if<Collective>(&op)) return !c->async;
  return true;
}

bool is_async_collective(const Op& op) {
  const auto* c = std::get_if<Collective>(&op);
  return c && c->async;
}

/// The dependencies of each op of a program, as program indices (the header's rule): the
/// last op before it that holds the rank; for an async collective also the async
/// collective before it (one stream); and the async collective it waits for
/// (async_needed_before: they end in stream order, so waiting for one is waiting for all
/// before it).
using OpDeps = std::vector<std::size_t>;
std::vector<OpDeps> program_dependencies(const std::vector<Op>& program) {
  std::vector<OpDeps> deps(program.size());
  std::optional<std::size_t> last_holding;
  std::vector<std::size_t> async;  // the async collectives so far, in stream order
  for (std::size_t i = 0; i < program.size(); ++i) {
    const Op& op = program[i];
    if (last_holding) deps[i].push_back(*last_holding);
    if (is_async_collective(op) && !async.empty()) deps[i].push_back(async.back());
    if (const std::size_t needed = async_needed_before(op, async.size()); needed > 0)
      deps[i].push_back(async[needed - 1]);
    if (holds_rank(op)) last_holding = i;
    if (is_async_collective(op)) async.push_back(i);
  }
  return deps;
}

/// comm_tag of each send and receive: the k-th message a rank sends to a peer is tag k;
/// a receive takes its send's tag, paired by core/matching.hpp's rule (the k-th send and
/// the k-th receive of a channel). `paired`: whether a send or receive has its partner
/// (a receive without one has no tag).
struct MessageTags {
  PerRank<std::vector<std::optional<int>>> tag;
  PerRank<std::vector<bool>> paired;
};
MessageTags message_tags(const Schedule& s) {
  MessageTags m{PerRank<std::vector<std::optional<int>>>(s.num_ranks()),
                PerRank<std::vector<bool>>(s.num_ranks())};
  std::map<MessageChannel, std::deque<OpRef>> sent;
  for (const RankId r : s.rank_ids()) {
    std::map<RankId, int> count;
    m.paired[r].resize(s.programs[r].size());
    for (std::size_t i = 0; i < s.programs[r].size(); ++i) {
      std::optional<int>& tag = m.tag[r].emplace_back();
      if (const auto* x = std::get_if<Send>(&s.programs[r][i])) {
        tag = count[x->peer]++;
        sent[channel_of(r, x->peer, x->tag)].push_back({r, i});
      }
    }
  }
  for (const RankId r : s.rank_ids()) {
    for (std::size_t i = 0; i < s.programs[r].size(); ++i) {
      const auto* x = std::get_if<Recv>(&s.programs[r][i]);
      if (!x) continue;
      std::deque<OpRef>& queue = sent[channel_of(x->peer, r, x->tag)];
      if (queue.empty()) continue;
      const OpRef send = queue.front();
      queue.pop_front();
      m.tag[r][i] = m.tag[send.rank][send.index];
      m.paired[r][i] = m.paired[send.rank][send.index] = true;
    }
  }
  return m;
}

chakra::CollectiveCommType comm_type(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return chakra::ALL_REDUCE;
    case CollectiveKind::kAllGather:
      return chakra::ALL_GATHER;
    case CollectiveKind::kReduceScatter:
      return chakra::REDUCE_SCATTER;
    case CollectiveKind::kAllToAll:
      return chakra::ALL_TO_ALL;
  }
  return chakra::ALL_REDUCE;
}

std::int64_t whole_bytes(double bytes) {
  return std::llround(bytes);
}
std::uint64_t micros(double seconds) {
  return static_cast<std::uint64_t>(std::llround(seconds * 1e6));
}

/// The Chakra fields of op `index` of `rank`; `ids` maps program indices to node ids.
NodeFacts node_facts(const Schedule& s, RankId rank, std::size_t index, const OpDeps& deps,
                     const std::vector<NodeId>& ids, std::optional<int> tag) {
  NodeFacts f;
  for (std::size_t d : deps) f.data_deps.push_back(ids[d]);
  const auto message = [&](chakra::NodeType type, const char* peer_key, RankId peer, double bytes) {
    f.type = type;
    f.ints = {{peer_key, peer.value()},
              {"comm_tag", tag.value_or(-1)},
              {"comm_size", whole_bytes(bytes)}};
  };
  std::visit(
      Overloaded{
          [&](const Compute& c) {
            f.type = chakra::COMP_NODE;
            f.duration_micros = micros(c.seconds);
          },
          [&](const OptimizerStep& o) {
            f.type = chakra::COMP_NODE;
            f.duration_micros = micros(o.seconds);
          },
          [&](const Send& x) { message(chakra::COMM_SEND_NODE, "comm_dst", x.peer, x.bytes); },
          [&](const Recv& x) { message(chakra::COMM_RECV_NODE, "comm_src", x.peer, x.bytes); },
          [&](const Collective& c) {
            f.type = chakra::COMM_COLL_NODE;
            f.ints = {{"comm_type", comm_type(c.kind)}, {"comm_size", whole_bytes(c.bytes)}};
            f.pg_name = to_string(c.group);  // comm_group.json's key
          },
      },
      s.programs[rank][index]);
  return f;
}

void set_attr(chakra::AttributeProto* a, const std::string& name, const std::string& value) {
  a->set_name(name);
  a->set_string_val(value);
}

/// comm_src, comm_dst and comm_tag as int32, the rest (sizes, types, num_ops) as int64, as
/// Chakra's own converter writes them.
void set_int_attr(chakra::AttributeProto* a, const std::string& name, std::int64_t value) {
  a->set_name(name);
  if (name == "comm_src" || name == "comm_dst" || name == "comm_tag") {
    a->set_int32_val(static_cast<std::int32_t>(value));
  } else {
    a->set_int64_val(value);
  }
}

void append_delimited(const google::protobuf::MessageLite& message, std::string& out) {
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteVarint32(static_cast<std::uint32_t>(message.ByteSizeLong()));
  message.SerializeWithCachedSizes(&coded);
}

std::string first_word(const std::string& line) {
  return line.substr(0, line.find(' '));
}

std::string comm_groups_json(const Schedule& s) {
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  for (const GroupId g : s.groups.ids()) {
    std::vector<int> ranks;
    for (const RankId r : s.groups[g]) ranks.push_back(r.value());
    groups[std::to_string(g.value())] = ranks;
  }
  return groups.dump(2) + "\n";
}

// ---- reading ----------------------------------------------------------------------

/// One .et file: its metadata and nodes in file order.
struct TraceFile {
  std::string name;  ///< "DIR/loom.3.et", for messages
  chakra::GlobalMetadata metadata;
  std::vector<chakra::Node> nodes;
};

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what);
}

std::string node_place(const TraceFile& file, const chakra::Node& node) {
  return file.name + ": node " + std::to_string(node.id()) +
         (node.name().empty() ? "" : " (" + node.name() + ")");
}

std::string read_bytes(const std::filesystem::path& path, const char* what) {
  std::ifstream in = open_for_read(path.string(), what);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TraceFile decode_trace_file(const std::string& name, const std::string& data) {
  // protobuf would also log a bad string field on stderr; the error below says it once.
  // (Process-wide: Loom reads no other protobuf.)
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  const std::string& where = name;
  TraceFile file;
  file.name = name;
  if (data.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    refuse(where, "larger than 2 GiB, which protobuf's stream reader cannot read");
  google::protobuf::io::CodedInputStream coded(reinterpret_cast<const std::uint8_t*>(data.data()),
                                               static_cast<int>(data.size()));
  bool metadata = true;
  while (coded.CurrentPosition() < static_cast<int>(data.size())) {
    const int at = coded.CurrentPosition();
    const std::string what = metadata ? "the global metadata" : "a node";
    std::uint32_t size = 0;
    if (!coded.ReadVarint32(&size))
      refuse(where, "truncated: " + what + "'s length at byte " + std::to_string(at));
    const int left = static_cast<int>(data.size()) - coded.CurrentPosition();
    if (size > static_cast<std::uint32_t>(left))
      refuse(where, "truncated: " + what + " at byte " + std::to_string(at) + " needs " +
                        std::to_string(size) + " bytes, " + std::to_string(left) + " remain");
    const auto limit = coded.PushLimit(static_cast<int>(size));
    google::protobuf::MessageLite* message =
        metadata ? static_cast<google::protobuf::MessageLite*>(&file.metadata)
                 : &file.nodes.emplace_back();
    if (!message->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
      refuse(where, what + " at byte " + std::to_string(at) + " is not a Chakra " +
                        (metadata ? "GlobalMetadata" : "Node"));
    coded.PopLimit(limit);
    metadata = false;
  }
  if (metadata) refuse(where, "empty: a Chakra trace starts with its global metadata");
  return file;
}

/// The folder's traces, rank 0 first: PREFIX.0.et .. PREFIX.(n-1).et with one prefix.
std::vector<std::filesystem::path> trace_paths(const std::filesystem::path& dir) {
  static const std::regex kName(R"((.+)\.(\d+)\.et)");
  std::map<std::string, std::map<int, std::filesystem::path>> by_prefix;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kName)) continue;
    int rank = 0;
    const std::string digits = m[2];
    if (std::from_chars(digits.data(), digits.data() + digits.size(), rank).ec != std::errc{})
      throw InputError(entry.path().string() + ": the rank number is out of range");
    by_prefix[m[1]][rank] = entry.path();
  }
  if (by_prefix.empty())
    throw InputError(dir.string() + ": no Chakra trace (PREFIX.RANK.et) in this folder");
  if (by_prefix.size() > 1)
    throw InputError(dir.string() + ": traces with several prefixes ('" + by_prefix.begin()->first +
                     "', '" + std::next(by_prefix.begin())->first +
                     "'): keep one workload per folder");
  std::vector<std::filesystem::path> paths;
  for (const auto& [rank, path] : by_prefix.begin()->second) {
    if (rank != std::ssize(paths))
      throw InputError(dir.string() + ": no trace for rank " + std::to_string(paths.size()) + " (" +
                       by_prefix.begin()->first + "." + std::to_string(paths.size()) +
                       ".et): ranks run from 0 without gaps");
    paths.push_back(path);
  }
  return paths;
}

const chakra::AttributeProto* find_attr(
    const google::protobuf::RepeatedPtrField<chakra::AttributeProto>& attrs,
    const std::string& name) {
  for (const chakra::AttributeProto& a : attrs)
    if (a.name() == name) return &a;
  return nullptr;
}

std::optional<std::int64_t> int_value(const chakra::AttributeProto& a) {
  using A = chakra::AttributeProto;
  switch (a.value_case()) {
    case A::kInt32Val:
      return a.int32_val();
    case A::kInt64Val:
      return a.int64_val();
    case A::kUint32Val:
      return a.uint32_val();
    case A::kUint64Val:
      return static_cast<std::int64_t>(a.uint64_val());
    case A::kSint32Val:
      return a.sint32_val();
    case A::kSint64Val:
      return a.sint64_val();
    default:
      return std::nullopt;
  }
}

std::string string_attr(const google::protobuf::RepeatedPtrField<chakra::AttributeProto>& attrs,
                        const std::string& name, const std::string& where) {
  const chakra::AttributeProto* a = find_attr(attrs, name);
  if (!a || a->value_case() != chakra::AttributeProto::kStringVal)
    refuse(where, "no string attribute '" + name + "'");
  return a->string_val();
}

/// `text` as one line of the joined `loom` text, which must stand for one thing: a line
/// break would shift every line after it (and the places its errors name), and a blank or
/// '#' line would be skipped, leaving a node without its op.
const std::string& one_line(const std::string& text, const std::string& where, const char* name) {
  if (text.find_first_of("\r\n") != std::string::npos)
    refuse(where, std::string(name) + " holds a line break: it is one line of the `loom` format");
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos || text[first] == '#')
    refuse(where, std::string(name) + " is blank or a comment: it must be an op");
  return text;
}

std::string id_list(const std::vector<NodeId>& ids) {
  std::string out;
  for (NodeId id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return "[" + out + "]";
}

/// The first field in which `node` says something other than `want`; "" when none does.
std::string difference(const chakra::Node& node, const NodeFacts& want) {
  if (node.type() != want.type)
    return "type " + chakra::NodeType_Name(node.type()) + ", but its loom_op is a " +
           chakra::NodeType_Name(want.type);
  const std::vector<NodeId> ctrl(node.ctrl_deps().begin(), node.ctrl_deps().end());
  const std::vector<NodeId> data(node.data_deps().begin(), node.data_deps().end());
  const std::string order = " (a Loom rank runs its nodes in file order; core/schedule.hpp)";
  if (!ctrl.empty())
    return "ctrl_deps " + id_list(ctrl) + ": Loom writes every dependency as data_deps" + order;
  if (data != want.data_deps)
    return "data_deps " + id_list(data) + ", but its place gives " + id_list(want.data_deps) +
           order;
  if (node.duration_micros() != want.duration_micros)
    return "duration_micros " + std::to_string(node.duration_micros()) +
           ", but its loom_op's seconds give " + std::to_string(want.duration_micros) +
           ": edit both";
  for (const auto& [name, value] : want.ints) {
    const chakra::AttributeProto* a = find_attr(node.attr(), name);
    const std::optional<std::int64_t> got = a ? int_value(*a) : std::nullopt;
    if (!got) return "no integer attribute '" + name + "'";
    if (*got != value)
      return name + " " + std::to_string(*got) + ", but its loom_op gives " + std::to_string(value);
  }
  if (want.type == chakra::COMM_COLL_NODE) {
    const chakra::AttributeProto* a = find_attr(node.attr(), "pg_name");
    const std::string got = a ? a->string_val() : "";
    if (got != want.pg_name)
      return "pg_name '" + got + "', but its loom_op gives '" + want.pg_name + "'";
  }
  return "";
}

/// The schedule the files' loom_* attributes spell, parsed by the `loom` text reader; a
/// parse error names the file and node (or metadata) whose text it is in.
Schedule parse_traces(const std::vector<TraceFile>& files) {
  ScheduleTextParts parts;
  std::vector<std::string> places;  // places[line - 1]: where the joined text's line came from
  const std::string meta = files.front().name + ": global metadata";
  parts.header = string_attr(files.front().metadata.attr(), kHeaderAttr, meta);
  for (char c : parts.header)
    if (c == '\n') places.push_back(meta + " " + kHeaderAttr);
  for (const TraceFile& file : files) {
    const std::string where = file.name + ": global metadata";
    if (string_attr(file.metadata.attr(), kHeaderAttr, where) != parts.header)
      refuse(where, std::string(kHeaderAttr) + " differs from " + files.front().name +
                        "'s: the traces are not of one schedule");
    const std::string rank_line =
        one_line(string_attr(file.metadata.attr(), kRankAttr, where), where, kRankAttr);
    if (!rank_line.starts_with("rank "))
      refuse(where, std::string(kRankAttr) + " is not a 'rank N ...' line");
    parts.rank_lines.push_back(rank_line);
    places.push_back(where + " " + kRankAttr);
    auto& ops = parts.op_lines.emplace_back();
    for (const chakra::Node& node : file.nodes) {
      const chakra::AttributeProto* op = find_attr(node.attr(), kOpAttr);
      if (!op || op->value_case() != chakra::AttributeProto::kStringVal)
        refuse(node_place(file, node),
               chakra::NodeType_Name(node.type()) +
                   " without a loom_op attribute: Loom runs a node only when it names its "
                   "op (stage, pass, microbatch, layers, peer), which traces from other "
                   "producers do not carry (docs/schedule-ir.md)");
      ops.push_back(one_line(op->string_val(), node_place(file, node), kOpAttr));
      places.push_back(node_place(file, node));
    }
  }
  const std::string source = "<chakra>";
  try {
    return parse_schedule(join_schedule_parts(parts), source);
  } catch (const InputError& e) {
    // "<chakra>:LINE:COL: what" -> "loom.3.et: node 17 (0F0): what"
    const std::string_view message = e.what();
    if (!message.starts_with(source + ":")) throw;
    int line = 0;
    const auto parsed =
        std::from_chars(message.data() + source.size() + 1, message.data() + message.size(), line);
    const std::size_t what = message.find(": ");
    if (parsed.ec != std::errc{} || line < 1 || line > std::ssize(places) ||
        what == std::string_view::npos)
      throw;
    throw InputError(places[line - 1] + ": " + std::string(message.substr(what + 2)));
  }
}

}  // namespace

ChakraTrace export_chakra(const Schedule& schedule, const Model& model,
                          const std::vector<Sample>& samples) {
  const ScheduleTextParts parts = format_schedule_parts(schedule);
  const auto tags = message_tags(schedule);
  ChakraTrace trace;
  for (const RankId r : schedule.rank_ids()) {
    trace.names.push_back(std::string(kPrefix) + "." + std::to_string(r.value()) + ".et");
    std::string& out = trace.ranks.emplace_back();
    chakra::GlobalMetadata metadata;
    metadata.set_version(kSchemaVersion);
    set_attr(metadata.add_attr(), kHeaderAttr, parts.header);
    set_attr(metadata.add_attr(), kRankAttr, parts.rank_lines[r]);
    append_delimited(metadata, out);
    const std::vector<Op>& program = schedule.programs[r];
    const std::vector<OpDeps> deps = program_dependencies(program);
    std::vector<NodeId> ids(program.size());
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i;
    chakra::Node node;
    for (std::size_t i = 0; i < program.size(); ++i) {
      const NodeFacts f = node_facts(schedule, r, i, deps[i], ids, tags.tag[r][i]);
      node.Clear();
      node.set_id(i);
      node.set_name(first_word(parts.op_lines[r][i]));
      node.set_type(f.type);
      for (NodeId d : f.data_deps) node.add_data_deps(d);
      node.set_duration_micros(f.duration_micros);
      set_attr(node.add_attr(), kOpAttr, parts.op_lines[r][i]);
      if (f.type == chakra::COMP_NODE) {
        chakra::AttributeProto* cpu = node.add_attr();
        cpu->set_name("is_cpu_op");
        cpu->set_bool_val(false);
        if (const auto* c = std::get_if<Compute>(&program[i]))
          set_int_attr(node.add_attr(), "num_ops",
                       std::llround(compute_op_flops(schedule, model, samples, r, *c)));
      }
      for (const auto& [name, value] : f.ints) set_int_attr(node.add_attr(), name, value);
      if (!f.pg_name.empty()) set_attr(node.add_attr(), "pg_name", f.pg_name);
      append_delimited(node, out);
    }
  }
  trace.comm_groups = comm_groups_json(schedule);
  trace.comm_groups_name = kChakraCommGroups;
  return trace;
}

void write_chakra(const ChakraTrace& trace, const std::filesystem::path& dir) {
  for (const RankId r : trace.ranks.ids()) {
    const std::string path = (dir / trace.names.at(r)).string();
    std::ofstream out(path, std::ios::binary);
    out << trace.ranks[r];
    finish_write(out, path);
  }
  const std::string path = (dir / trace.comm_groups_name).string();
  std::ofstream out = open_for_write(path);
  out << trace.comm_groups;
  finish_write(out, path);
}

bool is_chakra_folder(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return false;
  static const std::regex kRankZero(R"(.+\.0\.et)");
  for (const auto& entry : std::filesystem::directory_iterator(path))
    if (std::regex_match(entry.path().filename().string(), kRankZero)) return true;
  return false;
}

ChakraTrace read_chakra_folder(const std::filesystem::path& dir) {
  ChakraTrace trace;
  for (const auto& path : trace_paths(dir)) {
    trace.names.push_back(path.string());
    trace.ranks.push_back(read_bytes(path, "Chakra trace"));
  }
  if (const auto groups = dir / kChakraCommGroups; std::filesystem::exists(groups)) {
    trace.comm_groups = read_bytes(groups, "communicator groups");
    trace.comm_groups_name = groups.string();
  }
  return trace;
}

Schedule decode_chakra(const ChakraTrace& trace, OpOrigins* origins) {
  std::vector<TraceFile> files;
  for (const RankId r : trace.ranks.ids())
    files.push_back(decode_trace_file(trace.names.at(r), trace.ranks[r]));
  if (files.empty()) throw InputError("no Chakra trace to read");
  Schedule s = parse_traces(files);
  // One rank per file, one op per node (one_line keeps the text from saying otherwise).
  if (s.num_ranks() != std::ssize(files))
    throw InputError(files.front().name + ": the traces hold " + std::to_string(s.num_ranks()) +
                     " ranks in " + std::to_string(files.size()) + " files");
  for (const RankId r : s.rank_ids()) {
    if (s.programs[r].size() != files[r.value()].nodes.size())
      throw InputError(files[r.value()].name + ": " +
                       std::to_string(files[r.value()].nodes.size()) + " nodes but " +
                       std::to_string(s.programs[r].size()) + " ops");
  }
  const auto tags = message_tags(s);
  if (origins) *origins = OpOrigins(s.num_ranks());
  for (const RankId r : s.rank_ids()) {
    const TraceFile& file = files[r.value()];
    std::vector<NodeId> ids;
    std::map<NodeId, std::size_t> index_of;
    for (const chakra::Node& node : file.nodes) {
      if (!index_of.emplace(node.id(), ids.size()).second)
        refuse(node_place(file, node), "a second node with this id");
      ids.push_back(node.id());
    }
    const std::vector<OpDeps> deps = program_dependencies(s.programs[r]);
    for (std::size_t i = 0; i < file.nodes.size(); ++i) {
      const chakra::Node& node = file.nodes[i];
      for (const auto& list : {node.ctrl_deps(), node.data_deps()}) {
        for (NodeId d : list) {
          const auto at = index_of.find(d);
          if (at == index_of.end())
            refuse(node_place(file, node), "depends on node " + std::to_string(d) + ", which " +
                                               file.name + " does not have");
          if (at->second >= i)
            refuse(
                node_place(file, node),
                "depends on node " + std::to_string(d) +
                    ", which comes after it (a cycle: a Loom rank runs its nodes in file order)");
        }
      }
      const Op& op = s.programs[r][i];
      if ((std::holds_alternative<Send>(op) || std::holds_alternative<Recv>(op)) &&
          !tags.paired[r][i])
        refuse(node_place(file, node),
               std::string(std::holds_alternative<Send>(op) ? "no receive matches this send"
                                                            : "no send matches this receive") +
                   " (Loom pairs the k-th send and the k-th receive of each rank pair and "
                   "layer edge)");
      if (const std::string diff =
              difference(node, node_facts(s, r, i, deps[i], ids, tags.tag[r][i]));
          !diff.empty())
        refuse(node_place(file, node), diff);
      if (origins)
        (*origins)[r].push_back(
            OpOrigin{.line = 0,
                     .column = 0,
                     .step = static_cast<int>(i),
                     .action = node.name(),
                     .place = std::filesystem::path(file.name).filename().string() + " node " +
                              std::to_string(node.id())});
    }
  }
  if (!trace.comm_groups.empty()) {
    const auto declared = nlohmann::json::parse(trace.comm_groups, nullptr, false);
    if (declared.is_discarded() || declared != nlohmann::json::parse(comm_groups_json(s)))
      refuse(trace.comm_groups_name,
             "is not the groups the traces' loom_schedule declares "
             "(remove it, or export the traces again)");
  }
  return s;
}

}  // namespace loom
