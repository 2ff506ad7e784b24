// Context parallelism on the host: zigzag rows and one layer's K/V exchange
// (ring_attention.hpp).
#include "executor/ring_attention.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace loom::exec {
namespace {

/// Columns [from, from + width) of `m`.
Matrix columns(const Matrix& m, int from, int width) {
  Matrix out(m.rows, width);
  for (int r = 0; r < m.rows; ++r) std::copy(m.row(r) + from, m.row(r) + from + width, out.row(r));
  return out;
}

/// `parts` side by side (same rows).
Matrix side_by_side(const std::vector<const Matrix*>& parts) {
  int cols = 0;
  for (const Matrix* p : parts) cols += p->cols;
  Matrix out(parts.front()->rows, cols);
  for (int r = 0; r < out.rows; ++r) {
    float* to = out.row(r);
    for (const Matrix* p : parts) to = std::copy(p->row(r), p->row(r) + p->cols, to);
  }
  return out;
}

std::vector<float> flatten(const std::vector<const Matrix*>& parts) {
  std::vector<float> out;
  for (const Matrix* p : parts) out.insert(out.end(), p->data.begin(), p->data.end());
  return out;
}

/// Rows `rows` of `m`, in that order.
Matrix take_rows(const Matrix& m, const std::vector<int>& rows) {
  Matrix out(static_cast<int>(rows.size()), m.cols);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(m.row(rows[r]), m.row(rows[r]) + m.cols, out.row(static_cast<int>(r)));
  return out;
}

/// Reads a rows x cols matrix from `flat` at `*at`, advancing it.
Matrix read_matrix(const std::vector<float>& flat, size_t* at, int rows, int cols) {
  Matrix m(rows, cols);
  if (*at + m.size() > flat.size()) throw std::logic_error("K/V exchange: buffer too short");
  std::copy(flat.begin() + static_cast<std::ptrdiff_t>(*at),
            flat.begin() + static_cast<std::ptrdiff_t>(*at + m.size()), m.data.begin());
  *at += m.size();
  return m;
}

}  // namespace

std::vector<int> zigzag_positions(const std::vector<int>& full_lengths, int cp, int rank) {
  std::vector<int> pos;
  for (int len : full_lengths) {
    const int chunk = len / (2 * cp);
    for (const int c : {rank, 2 * cp - 1 - rank}) {
      for (int i = 0; i < chunk; ++i) pos.push_back(c * chunk + i);
    }
  }
  return pos;
}

std::vector<int> zigzag_row_indices(const std::vector<int>& full_lengths, int cp, int rank) {
  const std::vector<int> pos = zigzag_positions(full_lengths, cp, rank);
  std::vector<int> rows;
  int offset = 0;
  size_t p = 0;
  for (int len : full_lengths) {
    for (int i = 0; i < len / cp; ++i) rows.push_back(offset + pos[p++]);
    offset += len;
  }
  return rows;
}

Matrix zigzag_rows(const Matrix& full, const std::vector<int>& full_lengths, int cp, int rank) {
  return take_rows(full, zigzag_row_indices(full_lengths, cp, rank));
}

KvExchange::KvExchange(int cp, int rank, std::vector<int> local_lengths, Matrix k, Matrix v)
    : cp_(cp), rank_(rank), local_lengths_(std::move(local_lengths)), held_(rank) {
  blocks_[rank] = {std::move(k), std::move(v), {}, {}};
}

Matrix KvExchange::forward_message(int* owner) const {
  const Block& b = blocks_.at(held_);
  *owner = held_;
  return side_by_side({&b.k, &b.v});
}

void KvExchange::take_forward_message(int owner, Matrix message) {
  const int width = blocks_.at(rank_).k.cols;
  if (owner < 0 || owner >= cp_ || message.cols != 2 * width)
    throw std::logic_error("K/V exchange: a block of owner " + std::to_string(owner) + " with " +
                           std::to_string(message.cols) + " columns");
  blocks_[owner] = {columns(message, 0, width), columns(message, width, width), {}, {}};
  held_ = owner;
}

std::vector<float> KvExchange::own_flat() const {
  const Block& b = blocks_.at(rank_);
  return flatten({&b.k, &b.v});
}

void KvExchange::take_all(const std::vector<float>& gathered) {
  const Matrix& own = blocks_.at(rank_).k;
  size_t at = 0;
  for (int o = 0; o < cp_; ++o) {
    Matrix k = read_matrix(gathered, &at, own.rows, own.cols);
    Matrix v = read_matrix(gathered, &at, own.rows, own.cols);
    blocks_[o] = {std::move(k), std::move(v), {}, {}};
  }
}

void KvExchange::keys(Matrix& k, Matrix& v, AttentionRows& rows) const {
  if (static_cast<int>(blocks_.size()) != cp_)
    throw std::logic_error("K/V exchange: " + std::to_string(blocks_.size()) + " of " +
                           std::to_string(cp_) + " blocks arrived before the attention");
  std::vector<int> full;
  for (int n : local_lengths_) full.push_back(n * cp_);
  const int width = blocks_.at(rank_).k.cols;
  int total = 0;
  for (int n : full) total += n;
  k = Matrix(total, width);
  v = Matrix(total, width);
  rows = {.q_lengths = local_lengths_,
          .k_lengths = full,
          .q_pos = zigzag_positions(full, cp_, rank_),
          .k_pos = {}};
  std::vector<std::vector<int>> owner_pos;
  for (int o = 0; o < cp_; ++o) owner_pos.push_back(zigzag_positions(full, cp_, o));
  int to = 0, from = 0;  // rows into k, v; rows of each block before this sample
  for (size_t s = 0; s < full.size(); ++s) {
    const int n = local_lengths_[s];
    for (int o = 0; o < cp_; ++o) {
      const Block& b = blocks_.at(o);
      for (int i = 0; i < n; ++i, ++to) {
        std::copy(b.k.row(from + i), b.k.row(from + i) + width, k.row(to));
        std::copy(b.v.row(from + i), b.v.row(from + i) + width, v.row(to));
        rows.k_pos.push_back(owner_pos[static_cast<size_t>(o)][static_cast<size_t>(from + i)]);
      }
    }
    from += n;
  }
}

void KvExchange::set_contributions(const Matrix& dk, const Matrix& dv) {
  const int width = dk.cols;
  const int rows = blocks_.at(rank_).k.rows;
  for (int o = 0; o < cp_; ++o)
    contribution_[o] = {{}, {}, Matrix(rows, width), Matrix(rows, width)};
  int from = 0, at = 0;  // rows of each block before this sample; rows of dk
  for (const int n : local_lengths_) {
    for (int o = 0; o < cp_; ++o) {
      Block& c = contribution_[o];
      for (int i = 0; i < n; ++i, ++at) {
        std::copy(dk.row(at), dk.row(at) + width, c.dk.row(from + i));
        std::copy(dv.row(at), dv.row(at) + width, c.dv.row(from + i));
      }
    }
    from += n;
  }
  // The block in hand at the first step is this rank's own, with its own contribution.
  Block& own = blocks_.at(rank_);
  own.dk = contribution_.at(rank_).dk;
  own.dv = contribution_.at(rank_).dv;
  held_ = rank_;
  sends = receives = 0;
}

Matrix KvExchange::backward_message(bool last_hop, int* owner) const {
  const Block& b = blocks_.at(held_);
  *owner = held_;
  return last_hop ? side_by_side({&b.dk, &b.dv}) : side_by_side({&b.k, &b.v, &b.dk, &b.dv});
}

void KvExchange::take_backward_message(int owner, const Matrix& message, bool last_hop) {
  const int width = blocks_.at(rank_).k.cols;
  if (owner < 0 || owner >= cp_ || message.cols != (last_hop ? 2 : 4) * width)
    throw std::logic_error("K/V exchange: a backward block of owner " + std::to_string(owner) +
                           " with " + std::to_string(message.cols) + " columns");
  if (last_hop) {  // the sum over every rank of this rank's own dK, dV
    if (owner != rank_)
      throw std::logic_error("K/V exchange: rank " + std::to_string(rank_) +
                             " received the gradients of rank " + std::to_string(owner) +
                             "'s keys");
    own_dk_ = columns(message, 0, width);
    own_dv_ = columns(message, width, width);
    return;
  }
  const int base = 2 * width;
  Block b{columns(message, 0, width), columns(message, width, width), columns(message, base, width),
          columns(message, base + width, width)};
  add_inplace(b.dk, contribution_.at(owner).dk);
  add_inplace(b.dv, contribution_.at(owner).dv);
  blocks_[owner] = std::move(b);
  held_ = owner;
}

std::vector<float> KvExchange::contributions_flat() const {
  std::vector<float> out;
  for (const auto& [owner, c] : contribution_) {
    out.insert(out.end(), c.dk.data.begin(), c.dk.data.end());
    out.insert(out.end(), c.dv.data.begin(), c.dv.data.end());
  }
  return out;
}

void KvExchange::take_own_sum(const std::vector<float>& summed_all) {
  const Matrix& own = blocks_.at(rank_).k;
  size_t at = 2 * static_cast<size_t>(rank_) * own.size();
  own_dk_ = read_matrix(summed_all, &at, own.rows, own.cols);
  own_dv_ = read_matrix(summed_all, &at, own.rows, own.cols);
}

}  // namespace loom::exec

namespace loom::exec {
namespace {

/// Row r of `part` into row rows[r] of `into`.
void put_rows(const Matrix& part, const std::vector<int>& rows, Matrix& into) {
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(part.row(static_cast<int>(r)), part.row(static_cast<int>(r)) + part.cols,
              into.row(rows[r]));
}

/// `part` into `into`'s columns from `from`.
void put_columns(const Matrix& part, int from, Matrix& into) {
  for (int r = 0; r < part.rows; ++r)
    std::copy(part.row(r), part.row(r) + part.cols, into.row(r) + from);
}

}  // namespace

HeadExchange::HeadExchange(int cp, std::vector<int> local_lengths, int heads, int kv_heads,
                           Matrix q, Matrix k, Matrix v)
    : cp_(cp),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(q.cols / heads),
      local_lengths_(std::move(local_lengths)) {
  if (heads % cp != 0 || kv_heads % cp != 0)
    throw std::logic_error("Ulysses: heads and kv_heads must divide by cp");
  for (int n : local_lengths_) full_lengths_.push_back(n * cp);
  local_ = {std::move(q), std::move(k), std::move(v)};
}

std::vector<int> HeadExchange::full_rows(int owner) const {
  return zigzag_row_indices(full_lengths_, cp_, owner);
}

HeadExchange::Buffers HeadExchange::outgoing() const {
  const int q_width = heads_ / cp_ * head_dim_, kv_width = kv_heads_ / cp_ * head_dim_;
  Buffers out(static_cast<size_t>(cp_));
  for (int m = 0; m < cp_; ++m) {
    std::vector<Matrix> parts;
    if (exchanges_ == 0) {  // Q, K, V of member m's heads, the rank's rows
      parts = {columns(local_[0], m * q_width, q_width), columns(local_[1], m * kv_width, kv_width),
               columns(local_[2], m * kv_width, kv_width)};
    } else if (exchanges_ == 2) {  // the output's gradient, member m's heads
      parts = {columns(local_[0], m * q_width, q_width)};
    } else {  // the output, or dQ, dK, dV: member m's rows, the rank's heads
      const std::vector<int> rows = full_rows(m);
      for (const Matrix& f : full_) parts.push_back(take_rows(f, rows));
    }
    std::vector<const Matrix*> pointers;
    for (const Matrix& p : parts) pointers.push_back(&p);
    out[static_cast<size_t>(m)] = flatten(pointers);
  }
  return out;
}

void HeadExchange::incoming(const Buffers& from) {
  if (std::ssize(from) != cp_) throw std::logic_error("Ulysses: one buffer per CP rank expected");
  const int q_width = heads_ / cp_ * head_dim_, kv_width = kv_heads_ / cp_ * head_dim_;
  int local_rows = 0, total = 0;
  for (int n : local_lengths_) local_rows += n;
  for (int n : full_lengths_) total += n;
  if (exchanges_ == 0 || exchanges_ == 2) {  // by heads: every owner's rows of the rank's
    const std::vector<int> widths =
        exchanges_ == 0 ? std::vector<int>{q_width, kv_width, kv_width} : std::vector<int>{q_width};
    std::vector<Matrix> whole;
    for (int w : widths) whole.emplace_back(total, w);
    for (int owner = 0; owner < cp_; ++owner) {
      size_t at = 0;
      const std::vector<int> rows = full_rows(owner);
      for (size_t i = 0; i < widths.size(); ++i)
        put_rows(read_matrix(from[static_cast<size_t>(owner)], &at, local_rows, widths[i]), rows,
                 whole[i]);
    }
    if (exchanges_ == 0)
      heads_in_ = std::move(whole);
    else
      dout_ = std::move(whole.front());
  } else {  // by rows: the rank's rows of every member's heads
    const std::vector<int> widths =
        exchanges_ == 1 ? std::vector<int>{q_width} : std::vector<int>{q_width, kv_width, kv_width};
    std::vector<Matrix> mine;
    for (int w : widths) mine.emplace_back(local_rows, w * cp_);
    for (int member = 0; member < cp_; ++member) {
      size_t at = 0;
      for (size_t i = 0; i < widths.size(); ++i)
        put_columns(read_matrix(from[static_cast<size_t>(member)], &at, local_rows, widths[i]),
                    member * widths[i], mine[i]);
    }
    local_ = std::move(mine);
    full_.clear();
  }
  ++exchanges_;
}

void HeadExchange::attend(bool causal) {
  if (exchanges_ != 1) throw std::logic_error("Ulysses: attention before the heads arrived");
  full_ = {attention_forward(heads_in_[0], heads_in_[1], heads_in_[2], full_lengths_, heads_ / cp_,
                             kv_heads_ / cp_, causal, &probs_)};
}

void HeadExchange::attend_backward() {
  if (exchanges_ != 3) throw std::logic_error("Ulysses: backward before the gradient arrived");
  Matrix dq, dk, dv;
  attention_backward(dout_, heads_in_[0], heads_in_[1], heads_in_[2], probs_, full_lengths_,
                     heads_ / cp_, kv_heads_ / cp_, dq, dk, dv);
  full_ = {std::move(dq), std::move(dk), std::move(dv)};
}

}  // namespace loom::exec
