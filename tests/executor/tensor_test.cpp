// The GEMM kernels are blocked for speed, but every output element must still be the sum
// of its products in ascending k, added to C last: the results are then independent of
// the blocking, and the same as the textbook loop's, bit for bit.
#include "executor/tensor.hpp"

#include <gtest/gtest.h>

namespace loom::exec {
namespace {

Matrix random_matrix(int rows, int cols, std::uint64_t key) {
  Matrix m(rows, cols);
  for (size_t i = 0; i < m.size(); ++i) m.data[i] = hash_uniform(hash_combine(key, i));
  return m;
}

/// op(A) op(B) by the definition, one dot product per element in ascending k, then added
/// to `c0` (zero when absent): what C += (A B^T) means.
Matrix textbook(const Matrix& a, bool a_t, const Matrix& b, bool b_t, const Matrix* c0) {
  const int m = a_t ? a.cols : a.rows, k = a_t ? a.rows : a.cols, n = b_t ? b.rows : b.cols;
  Matrix c = c0 ? *c0 : Matrix(m, n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p)
        s += (a_t ? a.at(p, i) : a.at(i, p)) * (b_t ? b.at(j, p) : b.at(p, j));
      c.at(i, j) += s;
    }
  return c;
}

/// The in-place accumulation C += op(A) B adds each product to C as it goes.
Matrix accumulated(const Matrix& a, bool a_t, const Matrix& b, Matrix c) {
  const int m = a_t ? a.cols : a.rows, k = a_t ? a.rows : a.cols;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < b.cols; ++j)
      for (int p = 0; p < k; ++p) c.at(i, j) += (a_t ? a.at(p, i) : a.at(i, p)) * b.at(p, j);
  return c;
}

TEST(Gemm, EveryTranspositionEqualsTheTextbookLoopBitForBit) {
  // Row counts around the kernel's block of four, and a k long enough to round.
  for (const int m : {1, 3, 4, 7, 13}) {
    const int k = 37, n = 11;
    const Matrix a = random_matrix(m, k, 1), at = random_matrix(k, m, 2);
    const Matrix b = random_matrix(k, n, 3), bt = random_matrix(n, k, 4);
    const Matrix c0 = random_matrix(m, n, 5);

    Matrix c;
    matmul(a, b, c);
    EXPECT_EQ(c.data, textbook(a, false, b, false, nullptr).data) << "matmul m " << m;
    c = c0;
    matmul(a, b, c, /*accumulate=*/true);
    EXPECT_EQ(c.data, accumulated(a, false, b, c0).data) << "matmul += m " << m;

    matmul_bt(a, bt, c);
    EXPECT_EQ(c.data, textbook(a, false, bt, true, nullptr).data) << "matmul_bt m " << m;
    c = c0;
    matmul_bt(a, bt, c, true);
    EXPECT_EQ(c.data, textbook(a, false, bt, true, &c0).data) << "matmul_bt += m " << m;

    matmul_at(at, b, c);
    EXPECT_EQ(c.data, textbook(at, true, b, false, nullptr).data) << "matmul_at m " << m;
    c = c0;
    matmul_at(at, b, c, true);
    EXPECT_EQ(c.data, accumulated(at, true, b, c0).data) << "matmul_at += m " << m;
  }
}

}  // namespace
}  // namespace loom::exec
