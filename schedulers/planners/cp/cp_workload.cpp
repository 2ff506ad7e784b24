// Per-query-block workload W_b (dissertation Alg 1 line 5): the key blocks of row b that
// are not fully masked.
//
// Testing token pairs would cost O(T^2); instead the mask is cut into segments (maximal
// runs of equal words). Within one (query segment piece, key segment) pair the predicate
// depends only on positions, and the keys some query of the piece attends form one
// interval:
//   no causal bit:          the whole key segment
//   causal:                 keys <= the piece's last query
//   causal + window W:      and keys > the piece's first query - W (sinks exempt)
// (a key k is seen by some q in [q0, q1] iff [k, k + W - 1] meets [q0, q1]). A row's
// workload is the size of the union of these intervals in key-block units. Key segments
// are visited in position order, so the intervals arrive sorted by start and the union is
// one sweep. Cost: O(query blocks x segments), independent of the block sizes. Masks whose
// words change every few tokens go to the bitset method (cp_workload_bitset.cpp) instead.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {

/// cp_workload_bitset.cpp: the method for masks with many short runs.
std::vector<std::int64_t> block_workloads_by_bitsets(const AttentionMask& mask,
                                                     const BlockSizes& sizes,
                                                     std::vector<std::vector<KeyBlockRun>>* rows);

namespace {

struct Segment {
  std::int64_t first = 0;  ///< first token
  std::int64_t last = 0;   ///< last token (inclusive)
  std::uint64_t word = 0;
};

std::vector<Segment> segments_of(const AttentionMask& mask) {
  std::vector<Segment> segments;
  for (std::int64_t i = 0; const std::uint64_t word : mask.words) {  // i: token position
    if (!segments.empty() && segments.back().word == word) {
      segments.back().last = i;
    } else {
      segments.push_back({i, i, word});
    }
    ++i;
  }
  return segments;
}

struct Interval {
  std::int64_t first = 0;
  std::int64_t last = 0;
};

/// Keys of `key` seen by some query of `piece` (possibly empty: first > last).
Interval visible_keys(const Segment& piece, const Segment& key, std::int64_t window) {
  Interval keys{key.first, key.last};
  if ((piece.word & kCausalBit) == 0) return keys;
  keys.last = std::min(keys.last, piece.last);
  if (window > 0 && (key.word & kSinkBit) == 0)
    keys.first = std::max(keys.first, piece.first - window + 1);
  return keys;
}

/// W_b of the query block made of `pieces` (its parts of the segments it overlaps); with
/// `runs`, also the key blocks counted, as sorted disjoint runs.
std::int64_t row_workload(const std::vector<Segment>& pieces, const std::vector<Segment>& segments,
                          std::int64_t window, std::int64_t key_block,
                          std::vector<KeyBlockRun>* runs) {
  // Causal-only rows see nothing past their last query: stop the scan there.
  std::int64_t reach = 0;
  for (const Segment& p : pieces)
    reach =
        (p.word & kCausalBit) ? std::max(reach, p.last) : std::numeric_limits<std::int64_t>::max();
  std::int64_t count = 0;
  std::int64_t covered_end = 0;  // key blocks [0, covered_end) are already counted or passed
  std::vector<Interval> found;
  for (const Segment& key : segments) {
    if (key.first > reach) break;
    found.clear();
    for (const Segment& piece : pieces) {
      if (!modalities_compatible(piece.word, key.word)) continue;
      const Interval keys = visible_keys(piece, key, window);
      if (keys.first <= keys.last) found.push_back(keys);
    }
    // Intervals of one key segment all lie inside it; sort them by start for the sweep.
    std::sort(found.begin(), found.end(),
              [](const Interval& a, const Interval& b) { return a.first < b.first; });
    for (const Interval& keys : found) {
      const std::int64_t first_block = std::max(keys.first / key_block, covered_end);
      const std::int64_t last_block = keys.last / key_block;
      if (last_block >= first_block) {
        count += last_block - first_block + 1;
        if (runs) append_run(*runs, first_block, last_block);
      }
      covered_end = std::max(covered_end, last_block + 1);
    }
  }
  return count;
}

std::vector<std::int64_t> block_workloads_by_segments(const AttentionMask& mask,
                                                      const std::vector<Segment>& segments,
                                                      const BlockSizes& sizes,
                                                      std::vector<std::vector<KeyBlockRun>>* rows) {
  std::vector<std::int64_t> workloads;  // one per query block
  std::vector<Segment> pieces;
  std::size_t s = 0;  // first segment overlapping the current query block
  for (std::int64_t first = 0; first < mask.size(); first += sizes.query_block) {
    const std::int64_t last = std::min(first + sizes.query_block, mask.size()) - 1;
    while (segments[s].last < first) ++s;
    pieces.clear();
    for (std::size_t i = s; i < segments.size() && segments[i].first <= last; ++i)
      pieces.push_back(
          {std::max(first, segments[i].first), std::min(last, segments[i].last), segments[i].word});
    std::vector<KeyBlockRun>* runs = rows ? &rows->emplace_back() : nullptr;
    workloads.push_back(row_workload(pieces, segments, mask.window, sizes.key_block, runs));
  }
  return workloads;
}

/// Rough operation counts of the two methods, to pick the cheaper.
bool segments_are_cheaper(const AttentionMask& mask, const std::vector<Segment>& segments,
                          const BlockSizes& sizes) {
  const double n = static_cast<double>(mask.size());
  const double query_blocks = std::ceil(n / static_cast<double>(sizes.query_block));
  const double s = static_cast<double>(segments.size());
  const double pieces = std::min(static_cast<double>(sizes.query_block), s / query_blocks + 1);
  const double segment_cost = query_blocks * s * pieces;
  std::vector<std::uint64_t> distinct;  // distinct words, capped: enough to decide
  for (const Segment& segment : segments) {
    const std::uint64_t w = segment.word;
    if (std::find(distinct.begin(), distinct.end(), w) == distinct.end()) distinct.push_back(w);
    if (distinct.size() > 4096) return true;  // bitsets would cost more than they save
  }
  const double d = static_cast<double>(distinct.size());
  const double key_blocks = std::ceil(n / static_cast<double>(sizes.key_block));
  if (d * key_blocks / 8 > 1e9) return true;  // the bitsets alone would take > 1 GB
  const double bitset_cost = query_blocks * std::min(pieces, d) * d *
                             (key_blocks / 64 + 2.0 * static_cast<double>(sizes.key_block));
  return segment_cost <= bitset_cost;
}

}  // namespace

namespace {

/// W_b per query block by `method`; with `rows`, each row's key blocks too.
std::vector<std::int64_t> workloads_by(const AttentionMask& mask, const BlockSizes& sizes,
                                       WorkloadMethod method,
                                       std::vector<std::vector<KeyBlockRun>>* rows) {
  if (sizes.query_block < 1) throw InputError("--query-block: must be >= 1 token");
  if (sizes.key_block < 1) throw InputError("--key-block: must be >= 1 token");
  if (mask.size() == 0) throw InputError("attention mask: no tokens");
  if (mask.window < 0) throw InputError("attention mask: window must be >= 0");
  if (method == WorkloadMethod::kBitsets) return block_workloads_by_bitsets(mask, sizes, rows);
  const std::vector<Segment> segments = segments_of(mask);
  if (method == WorkloadMethod::kAuto && !segments_are_cheaper(mask, segments, sizes))
    return block_workloads_by_bitsets(mask, sizes, rows);
  return block_workloads_by_segments(mask, segments, sizes, rows);
}

}  // namespace

std::vector<std::int64_t> block_workloads(const AttentionMask& mask, const BlockSizes& sizes,
                                          WorkloadMethod method) {
  return workloads_by(mask, sizes, method, nullptr);
}

std::vector<std::vector<KeyBlockRun>> visible_key_blocks(const AttentionMask& mask,
                                                         const BlockSizes& sizes,
                                                         WorkloadMethod method) {
  std::vector<std::vector<KeyBlockRun>> rows;
  workloads_by(mask, sizes, method, &rows);
  return rows;
}

}  // namespace loom
