// Scaled dot-product attention per sample and head on packed rows, with GQA (query head
// h reads key/value head h / (heads / kv_heads)) and an optional causal mask.
#include <algorithm>
#include <cmath>

#include "executor/layer_math.hpp"

namespace loom::exec {

Matrix attention_forward(const Matrix& q, const Matrix& k, const Matrix& v,
                         const std::vector<int>& lengths, int heads, int kv_heads, bool causal,
                         std::vector<Matrix>* probs) {
  const int d = q.cols / heads;
  const int group = heads / kv_heads;
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  Matrix out(q.rows, q.cols);
  probs->clear();
  int offset = 0;
  for (int len : lengths) {
    for (int h = 0; h < heads; ++h) {
      const int kh = h / group;
      Matrix p(len, len);
      for (int i = 0; i < len; ++i) {
        const float* qi = q.row(offset + i) + h * d;
        const int visible = causal ? i + 1 : len;
        float max = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          const float* kj = k.row(offset + j) + kh * d;
          float s = 0;
          for (int c = 0; c < d; ++c) s += qi[c] * kj[c];
          p.at(i, j) = s * scale;
          max = std::max(max, p.at(i, j));
        }
        float sum = 0;
        for (int j = 0; j < visible; ++j) sum += p.at(i, j) = std::exp(p.at(i, j) - max);
        float* oi = out.row(offset + i) + h * d;
        for (int j = 0; j < visible; ++j) {
          p.at(i, j) /= sum;
          const float* vj = v.row(offset + j) + kh * d;
          for (int c = 0; c < d; ++c) oi[c] += p.at(i, j) * vj[c];
        }
      }
      probs->push_back(std::move(p));
    }
    offset += len;
  }
  return out;
}

void attention_backward(const Matrix& dout, const Matrix& q, const Matrix& k, const Matrix& v,
                        const std::vector<Matrix>& probs, const std::vector<int>& lengths,
                        int heads, int kv_heads, Matrix& dq, Matrix& dk, Matrix& dv) {
  const int d = q.cols / heads;
  const int group = heads / kv_heads;
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  dq = Matrix(q.rows, q.cols);
  dk = Matrix(k.rows, k.cols);
  dv = Matrix(v.rows, v.cols);
  int offset = 0;
  size_t index = 0;
  for (int len : lengths) {
    Matrix dp_row(1, len);  // dP_i, rewritten in full for each head and query
    float* dp = dp_row.row(0);
    for (int h = 0; h < heads; ++h) {
      const Matrix& p = probs[index++];
      const int kh = h / group;
      for (int i = 0; i < len; ++i) {
        const float* doi = dout.row(offset + i) + h * d;
        // dP_ij = dO_i . V_j;  dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij)  (softmax backward)
        float dot = 0;
        for (int j = 0; j < len; ++j) {
          if (p.at(i, j) == 0) {
            dp[j] = 0;
            continue;
          }
          const float* vj = v.row(offset + j) + kh * d;
          float s = 0;
          for (int c = 0; c < d; ++c) s += doi[c] * vj[c];
          dp[j] = s;
          dot += p.at(i, j) * s;
        }
        float* dqi = dq.row(offset + i) + h * d;
        const float* qi = q.row(offset + i) + h * d;
        for (int j = 0; j < len; ++j) {
          const float pij = p.at(i, j);
          if (pij == 0) continue;
          const float ds = pij * (dp[j] - dot) * scale;
          const float* kj = k.row(offset + j) + kh * d;
          float* dkj = dk.row(offset + j) + kh * d;
          float* dvj = dv.row(offset + j) + kh * d;
          for (int c = 0; c < d; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
            dvj[c] += pij * doi[c];
          }
        }
      }
    }
    offset += len;
  }
}

}  // namespace loom::exec
