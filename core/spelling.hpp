#pragma once
/// "Did you mean": the known word nearest a misspelt one, by edit distance.
#include <string>
#include <vector>

namespace loom {

/// Levenshtein distance (insertions, deletions, substitutions; each costs 1).
int edit_distance(const std::string& a, const std::string& b);

/// The candidate nearest `word` when it is close enough to be a typo (at most 2 edits, and
/// fewer than half the word's length); "" otherwise. Ties go to the earlier candidate.
std::string closest_spelling(const std::string& word, const std::vector<std::string>& candidates);

/// " (did you mean 'x'?)" for closest_spelling, or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace loom
