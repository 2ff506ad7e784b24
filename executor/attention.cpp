// Scaled dot-product attention per sample and head on packed rows, with GQA (query head
// h reads key/value head h / (heads / kv_heads)) and an optional causal mask by token
// position, so a context-parallel rank's queries can attend to keys of every rank.
#include <algorithm>
#include <cmath>

#include "executor/layer_math.hpp"

namespace loom::exec {

AttentionRows AttentionRows::self(const std::vector<int>& lengths) {
  AttentionRows rows{.q_lengths = lengths, .k_lengths = lengths, .q_pos = {}, .k_pos = {}};
  for (int len : lengths) {
    for (int i = 0; i < len; ++i) rows.q_pos.push_back(i);
  }
  rows.k_pos = rows.q_pos;
  return rows;
}

Matrix attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                         const AttentionRows& rows, int heads, int kv_heads, bool causal,
                         std::vector<Matrix>* probs) {
  const int d = q.cols / heads;
  const int group = heads / kv_heads;
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  Matrix out(q.rows, q.cols);
  probs->clear();
  int qo = 0, ko = 0;
  for (size_t s = 0; s < rows.q_lengths.size(); ++s) {
    const int nq = rows.q_lengths[s], nk = rows.k_lengths[s];
    auto visible = [&](int i, int j) {
      return !causal ||
             rows.k_pos[static_cast<size_t>(ko + j)] <= rows.q_pos[static_cast<size_t>(qo + i)];
    };
    for (int h = 0; h < heads; ++h) {
      const int kh = h / group;
      Matrix p(nq, nk);
      for (int i = 0; i < nq; ++i) {
        const float* qi = q.row(qo + i) + h * d;
        float max = -INFINITY;
        for (int j = 0; j < nk; ++j) {
          if (!visible(i, j)) continue;
          const float* kj = k.row(ko + j) + kh * d;
          float s_ij = 0;
          for (int c = 0; c < d; ++c) s_ij += qi[c] * kj[c];
          p.at(i, j) = s_ij * scale;
          max = std::max(max, p.at(i, j));
        }
        float sum = 0;
        for (int j = 0; j < nk; ++j) {
          if (visible(i, j)) sum += p.at(i, j) = std::exp(p.at(i, j) - max);
        }
        float* oi = out.row(qo + i) + h * d;
        for (int j = 0; j < nk; ++j) {
          if (!visible(i, j)) continue;
          p.at(i, j) /= sum;
          const float* vj = v.row(ko + j) + kh * d;
          for (int c = 0; c < d; ++c) oi[c] += p.at(i, j) * vj[c];
        }
      }
      probs->push_back(std::move(p));
    }
    qo += nq;
    ko += nk;
  }
  return out;
}

Matrix attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                         const std::vector<int>& lengths, int heads, int kv_heads, bool causal,
                         std::vector<Matrix>* probs) {
  return attention_forward(q, k, v, AttentionRows::self(lengths), heads, kv_heads, causal, probs);
}

void attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                        const std::vector<Matrix>& probs, const AttentionRows& rows, int heads,
                        int kv_heads, Matrix& dq, Matrix& dk, Matrix& dv) {
  const int d = q.cols / heads;
  const int group = heads / kv_heads;
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  dq = Matrix(q.rows, q.cols);
  dk = Matrix(k.rows, k.cols);
  dv = Matrix(v.rows, v.cols);
  int qo = 0, ko = 0;
  size_t index = 0;
  for (size_t s = 0; s < rows.q_lengths.size(); ++s) {
    const int nq = rows.q_lengths[s], nk = rows.k_lengths[s];
    Matrix dp_row(1, nk);  // dP_i, rewritten in full for each head and query
    float* dp = dp_row.row(0);
    for (int h = 0; h < heads; ++h) {
      const Matrix& p = probs[index++];
      const int kh = h / group;
      for (int i = 0; i < nq; ++i) {
        const float* doi = dout.row(qo + i) + h * d;
        // dP_ij = dO_i . V_j;  dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij)  (softmax backward)
        float dot = 0;
        for (int j = 0; j < nk; ++j) {
          if (p.at(i, j) == 0) {
            dp[j] = 0;
            continue;
          }
          const float* vj = v.row(ko + j) + kh * d;
          float s_ij = 0;
          for (int c = 0; c < d; ++c) s_ij += doi[c] * vj[c];
          dp[j] = s_ij;
          dot += p.at(i, j) * s_ij;
        }
        float* dqi = dq.row(qo + i) + h * d;
        const float* qi = q.row(qo + i) + h * d;
        for (int j = 0; j < nk; ++j) {
          const float pij = p.at(i, j);
          if (pij == 0) continue;
          const float ds = pij * (dp[j] - dot) * scale;
          const float* kj = k.row(ko + j) + kh * d;
          float* dkj = dk.row(ko + j) + kh * d;
          float* dvj = dv.row(ko + j) + kh * d;
          for (int c = 0; c < d; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
            dvj[c] += pij * doi[c];
          }
        }
      }
    }
    qo += nq;
    ko += nk;
  }
}

void attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                        const std::vector<Matrix>& probs, const std::vector<int>& lengths,
                        int heads, int kv_heads, Matrix& dq, Matrix& dk, Matrix& dv) {
  attention_backward(dout, q, k, v, probs, AttentionRows::self(lengths), heads, kv_heads, dq, dk,
                     dv);
}

}  // namespace loom::exec
