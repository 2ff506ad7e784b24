#include "core/spelling.hpp"

#include <algorithm>
#include <numeric>

namespace loom {

int edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic programme at a time: row[j] = distance(a[0, i), b[0, j)).
  std::vector<int> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_spelling(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = std::min(2, std::max(1, static_cast<int>(word.size()) / 2 - 1)) + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_spelling(word, candidates);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

}  // namespace loom
