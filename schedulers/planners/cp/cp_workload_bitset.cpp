// W_b by key-block bitsets, for masks with many short segments (a mask file where words
// alternate token by token), where the segment sweep of cp_workload.cpp costs
// O(query blocks x segments x pieces).
//
// For every distinct key word d, present[d] marks the key blocks holding a token with word
// d. A query block's row is the OR, over its distinct query words q and the key words d
// compatible with q, of present[d] restricted to the keys q can reach (all keys; keys up
// to q's last position if causal; and from q's first position - window + 1 unless d is a
// sink). Inner blocks of that range come from the bitset; the two edge blocks, where the
// range covers only part of a block, are checked token by token. Cost per query block:
// O(distinct query words x distinct key words x (key blocks / 64 + key_block)).
#include <algorithm>
#include <bit>
#include <iterator>
#include <span>

#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

using Bits = std::vector<std::uint64_t>;

void set_bit(Bits& bits, std::int64_t i) {
  bits[static_cast<std::size_t>(i >> 6)] |= 1ULL << (i & 63);
}

/// acc |= src over bit indices [from, to].
void or_range(Bits& acc, const Bits& src, std::int64_t from, std::int64_t to) {
  for (std::int64_t w = from >> 6; w <= to >> 6; ++w) {
    std::uint64_t mask = ~0ULL;
    if (w == from >> 6) mask &= ~0ULL << (from & 63);
    if (w == to >> 6 && (to & 63) != 63) mask &= (1ULL << ((to & 63) + 1)) - 1;
    acc[static_cast<std::size_t>(w)] |= src[static_cast<std::size_t>(w)] & mask;
  }
}

/// A query word of one query block, with the positions that bound what it reaches.
struct QueryItem {
  std::uint64_t word = 0;
  std::int64_t first = 0;
  std::int64_t last = 0;
};

/// Without a window only a word's last position matters, so one item per distinct word;
/// with one, each run of the word is its own item (its reach starts at the run's first).
std::vector<QueryItem> query_items(const AttentionMask& mask, std::int64_t first,
                                   std::int64_t last) {
  std::vector<QueryItem> items;
  const auto block = std::span(mask.words.begin() + first, mask.words.begin() + last + 1);
  for (std::int64_t next = first; const std::uint64_t word : block) {
    const std::int64_t i = next++;              // the word's token position
    if ((word & kModalityBits) == 0) continue;  // padding attends to nothing
    if (mask.window > 0) {
      if (!items.empty() && items.back().word == word && items.back().last == i - 1)
        items.back().last = i;
      else
        items.push_back({word, i, i});
      continue;
    }
    auto same = std::find_if(items.begin(), items.end(),
                             [&](const QueryItem& item) { return item.word == word; });
    if (same == items.end())
      items.push_back({word, i, i});
    else
      same->last = i;
  }
  return items;
}

struct KeyIndex {
  std::vector<std::uint64_t> words;  ///< distinct key words with modality bits
  std::vector<Bits> present;         ///< per distinct word: key blocks holding it
};

KeyIndex index_keys(const AttentionMask& mask, std::int64_t key_block, std::size_t bit_words) {
  KeyIndex index;
  for (std::int64_t i = 0; const std::uint64_t word : mask.words) {  // i: token position
    if ((word & kModalityBits) != 0) {
      auto it = std::find(index.words.begin(), index.words.end(), word);
      if (it == index.words.end()) {
        index.words.push_back(word);
        index.present.emplace_back(bit_words, 0);
        it = index.words.end() - 1;
      }
      // The word's bitset sits at the word's own position in `present`.
      set_bit(*std::next(index.present.begin(), it - index.words.begin()), i / key_block);
    }
    ++i;
  }
  return index;
}

/// Marks in `acc` the key blocks holding word `word` within tokens [lo, hi].
void add_reach(Bits& acc, const AttentionMask& mask, const Bits& present, std::uint64_t word,
               std::int64_t lo, std::int64_t hi, std::int64_t key_block) {
  auto scan = [&](std::int64_t a, std::int64_t b) {  // one block's tokens [a, b]
    const auto tokens = mask.words.begin();
    const auto hit = std::find(tokens + a, tokens + b + 1, word);
    if (hit != tokens + b + 1) set_bit(acc, (hit - tokens) / key_block);
  };
  const std::int64_t lo_block = lo / key_block;
  const std::int64_t hi_block = hi / key_block;
  if (lo_block == hi_block) return scan(lo, hi);
  std::int64_t from = lo_block;
  std::int64_t to = hi_block;
  if (lo % key_block != 0) {  // partly covered edge blocks: token by token
    scan(lo, (lo_block + 1) * key_block - 1);
    ++from;
  }
  if (hi % key_block != key_block - 1 && hi != mask.size() - 1) {
    scan(hi_block * key_block, hi);
    --to;
  }
  if (from <= to) or_range(acc, present, from, to);
}

}  // namespace

std::vector<std::int64_t> block_workloads_by_bitsets(const AttentionMask& mask,
                                                     const BlockSizes& sizes,
                                                     std::vector<std::vector<KeyBlockRun>>* rows) {
  const std::int64_t n = mask.size();
  const std::int64_t key_blocks = (n + sizes.key_block - 1) / sizes.key_block;
  const auto bit_words = static_cast<std::size_t>((key_blocks + 63) / 64);
  const KeyIndex keys = index_keys(mask, sizes.key_block, bit_words);
  std::vector<std::int64_t> workloads;  // one per query block
  Bits acc(bit_words);
  for (std::int64_t first = 0; first < n; first += sizes.query_block) {
    std::fill(acc.begin(), acc.end(), 0);
    for (const QueryItem& q :
         query_items(mask, first, std::min(first + sizes.query_block, n) - 1)) {
      const bool causal = (q.word & kCausalBit) != 0;
      for (std::size_t d = 0; d < keys.words.size(); ++d) {
        const std::uint64_t key = keys.words[d];
        if (!modalities_compatible(q.word, key)) continue;
        const std::int64_t hi = causal ? q.last : n - 1;
        const bool windowed = causal && mask.window > 0 && (key & kSinkBit) == 0;
        const std::int64_t lo = windowed ? std::max<std::int64_t>(0, q.first - mask.window + 1) : 0;
        if (lo <= hi) add_reach(acc, mask, keys.present[d], key, lo, hi, sizes.key_block);
      }
    }
    std::int64_t count = 0;
    for (std::uint64_t w : acc) count += std::popcount(w);
    workloads.push_back(count);
    if (rows) {
      std::vector<KeyBlockRun>& runs = rows->emplace_back();
      for (std::size_t w = 0; w < acc.size(); ++w) {  // each run of set bits in a word
        for (std::uint64_t bits = acc[w]; bits != 0;) {
          const int lowest = std::countr_zero(bits);
          const int length = std::countr_one(bits >> lowest);
          const auto base = static_cast<std::int64_t>(w) * 64;
          append_run(runs, base + lowest, base + lowest + length - 1);
          bits = lowest + length == 64 ? 0 : bits & (~0ULL << (lowest + length));
        }
      }
    }
  }
  return workloads;
}

}  // namespace loom
