// Random tokens (cornstarch-arxiv §5.3 as written: "randomly assigns tokens to GPUs"): the
// distribution that deals single tokens, not query blocks, so its blocks are each rank's
// own scattered tokens and the mask must be read again at that granularity.
//
// A rank keeps its tokens in sequence order and cuts them into query blocks; the K/V
// all-gather (§3.4.3) lays the ranks' tokens out rank after rank, cut into key blocks. A
// (query block, key block) pair counts when any of its token pairs attends. Testing every
// pair would cost O(T^2); the predicate (core/bitfield_mask.hpp) depends on a pair's words
// and, for a causal query, on where the key lies before it, so each block keeps its tokens'
// positions by distinct word. Without a sliding window a word pair attends iff its earliest
// key comes no later than its latest query; with one, iff some key lies less than the
// window before a query (one merge of the two sorted lists) or is a sink. Exact either way.
#include <algorithm>
#include <utility>

#include "core/errors.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

/// One distinct word of a block and its tokens' positions, ascending.
struct WordTokens {
  std::uint64_t word = 0;
  std::vector<std::int64_t> positions;
};

std::vector<WordTokens> by_word(const AttentionMask& mask, const std::vector<std::int64_t>& tokens,
                                std::size_t first, std::size_t end) {
  std::vector<WordTokens> words;
  for (std::size_t i = first; i < end; ++i) {
    const std::uint64_t word = mask.words[static_cast<std::size_t>(tokens[i])];
    auto it = std::find_if(words.begin(), words.end(),
                           [&](const WordTokens& w) { return w.word == word; });
    if (it == words.end()) it = words.insert(words.end(), {word, {}});
    it->positions.push_back(tokens[i]);
  }
  // A key block may hold the end of one rank's tokens and the start of the next's.
  for (WordTokens& w : words) std::sort(w.positions.begin(), w.positions.end());
  return words;
}

/// Some key lies in [q - window + 1, q] for some query q (both lists ascending).
bool within_window(const std::vector<std::int64_t>& queries, const std::vector<std::int64_t>& keys,
                   std::int64_t window) {
  auto q = queries.begin();
  for (const std::int64_t k : keys) {
    while (q != queries.end() && *q < k) ++q;  // the first query at or after the key
    if (q == queries.end()) return false;
    if (*q - k < window) return true;
  }
  return false;
}

bool attends(const std::vector<WordTokens>& queries, const std::vector<WordTokens>& keys,
             std::int64_t window) {
  for (const WordTokens& q : queries)
    for (const WordTokens& k : keys) {
      // The latest query against the earliest key: the pair's best chance before a window.
      if (!may_attend(q.word, k.word, q.positions.back(), k.positions.front())) continue;
      if (window == 0 || (q.word & kCausalBit) == 0 || (k.word & kSinkBit) != 0) return true;
      if (within_window(q.positions, k.positions, window)) return true;
    }
  return false;
}

}  // namespace

TokenDealtPlan plan_cp_random_tokens(const AttentionMask& mask, const CpPlanRequest& request) {
  if (mask.size() == 0) throw InputError("random-tokens: the mask has no tokens");
  const BlockSizes& sizes = request.sizes;
  if (sizes.query_block < 1 || sizes.key_block < 1)
    throw InputError("--query-block, --key-block: block sizes must be >= 1");
  const std::vector<int> token_owner = random_owners(mask.size(), request.cp, request.random_seed);
  PerCpRank<std::vector<std::int64_t>> tokens(request.cp);  // each rank's, in sequence order
  for (std::int64_t pos = 0; pos < mask.size(); ++pos)
    tokens[CpRank{token_owner[static_cast<std::size_t>(pos)]}].push_back(pos);
  std::vector<std::int64_t> gathered;  // the all-gather's order: rank 0's tokens first
  for (const auto& own : tokens) gathered.insert(gathered.end(), own.begin(), own.end());

  std::vector<std::vector<WordTokens>> key_blocks;
  const auto key_block = static_cast<std::size_t>(sizes.key_block);
  for (std::size_t k = 0; k < gathered.size(); k += key_block)
    key_blocks.push_back(by_word(mask, gathered, k, std::min(gathered.size(), k + key_block)));

  TokenDealtPlan out;
  std::vector<std::int64_t> workloads;
  std::vector<int> owners;
  const auto query_block = static_cast<std::size_t>(sizes.query_block);
  for (int r = 0; r < request.cp; ++r) {
    const std::vector<std::int64_t>& own = tokens[CpRank{r}];
    for (std::size_t q = 0; q < own.size(); q += query_block) {
      const std::vector<WordTokens> queries =
          by_word(mask, own, q, std::min(own.size(), q + query_block));
      std::vector<KeyBlockRun> runs;
      std::int64_t workload = 0;
      for (std::size_t k = 0; k < key_blocks.size(); ++k) {
        if (!attends(queries, key_blocks[k], mask.window)) continue;
        append_run(runs, static_cast<std::int64_t>(k), static_cast<std::int64_t>(k));
        ++workload;
      }
      out.rows.push_back(std::move(runs));
      workloads.push_back(workload);
      owners.push_back(r);
    }
  }
  std::vector<std::int64_t> rank_tokens;
  for (const auto& own : tokens) rank_tokens.push_back(std::ssize(own));
  out.plan = plan_from_owners(CpDistribution::kRandomTokens, std::move(workloads),
                              std::move(owners), std::move(rank_tokens), request);
  return out;
}

}  // namespace loom
