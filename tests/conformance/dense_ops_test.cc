// Conformance: matrix products, row/column operations, activations and losses.
#include <algorithm>

#include "tests/conformance/backend_fixture.h"

namespace dtrain::conformance {
namespace {
using kernels::Activation;
using kernels::Loss;

std::vector<double> reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                                   const std::vector<float>& a, const std::vector<float>& b,
                                   float beta, const std::vector<float>& c) {
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
      out[i * n + j] = alpha * sum + beta * double(c[i * n + j]);
    }
  return out;
}

double activate(Activation act, double z) {
  switch (act) {
    case Activation::kRelu: return z > 0 ? z : 0;
    case Activation::kLeakyRelu: return z > 0 ? z : kernels::kLeakyReluSlope * z;
    case Activation::kTanh: return std::tanh(z);
    case Activation::kSigmoid: return 1 / (1 + std::exp(-z));
    default: return z;
  }
}

std::vector<double> reference_softmax(const std::vector<float>& z, int64_t rows, int64_t cols) {
  std::vector<double> out(z.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = z[r * cols], sum = 0;
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, double(z[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) sum += out[r * cols + c] = std::exp(z[r * cols + c] - max);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] /= sum;
  }
  return out;
}
}  // namespace

TEST_CASE("gemm: every transpose combination, with alpha and beta (rtol 1e-5)") {
  const int64_t m = 37, n = 29, k = 53;
  for (Backend* be : backends_under_test())
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const auto a = random_vector(m * k, 1 + t), b = random_vector(k * n, 11 + t),
                 c = random_vector(m * n, 21 + t);
      Buffer da(*be, a), db(*be, b), dc(*be, c);
      be->gemm(ta, tb, m, n, k, 0.75f, da.get(), ta ? m : k, db.get(), tb ? k : n, 0.5f, dc.get(), n);
      expect_close(be->name() + " gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                   dc.host(), reference_gemm(ta, tb, m, n, k, 0.75f, a, b, 0.5f, c), 1e-5, 1e-5);
    }
}

TEST_CASE("row vector, column sums, axpy, multiply (exact to 1e-6)") {
  const int64_t rows = 67, cols = 45, n = rows * cols;
  const auto x = random_vector(n, 3), v = random_vector(cols, 4), y = random_vector(n, 5);
  std::vector<double> added(static_cast<size_t>(n)), sums(static_cast<size_t>(cols), 0.0), axpy(static_cast<size_t>(n)), product(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    added[i] = double(x[i]) + v[i % cols];
    sums[i % cols] += x[i];
    axpy[i] = double(y[i]) + 0.25 * x[i];
    product[i] = double(x[i]) * y[i];
  }
  for (Backend* be : backends_under_test()) {
    Buffer dx(*be, x), dv(*be, v), dy(*be, y), out(*be, n), dsums(*be, cols);
    be->add_row_vector(dx.get(), dv.get(), rows, cols);
    expect_close(be->name() + " add_row_vector", dx.host(), added, 1e-6, 1e-6);
    Buffer fresh(*be, x);
    be->column_sums(fresh.get(), rows, cols, dsums.get());
    expect_close(be->name() + " column_sums", dsums.host(), sums, 1e-5, 1e-5);
    be->multiply(fresh.get(), dy.get(), out.get(), n);
    expect_close(be->name() + " multiply", out.host(), product, 1e-6, 1e-7);
    be->axpy(0.25f, fresh.get(), dy.get(), n);
    expect_close(be->name() + " axpy", dy.host(), axpy, 1e-6, 1e-6);
  }
}

TEST_CASE("copy_rows: a block of one matrix into another (concat and split; exact)") {
  // Rows 1..5 of a 6x13 source, columns 4..10, into columns 2..8 of a 5x17 destination: the
  // strides, offsets and untouched elements are all checked.
  const int64_t rows = 5, cols = 7, src_stride = 13, dst_stride = 17;
  const auto src = random_vector(6 * src_stride, 8), dst = random_vector(rows * dst_stride, 9);
  std::vector<double> want(dst.begin(), dst.end());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[r * dst_stride + 2 + c] = src[(r + 1) * src_stride + 4 + c];
  for (Backend* be : backends_under_test()) {
    Buffer ds(*be, src), dd(*be, dst);
    be->copy_rows(dd.get() + 2, dst_stride, ds.get() + src_stride + 4, src_stride, rows, cols);
    expect_close(be->name() + " copy_rows", dd.host(), want, 0, 0);
  }
}

TEST_CASE("activations forward and backward (rtol 1e-5)") {
  const int64_t rows = 19, cols = 31, n = rows * cols;
  const auto z = random_vector(n, 7, -4.f, 4.f), d = random_vector(n, 8);
  for (int k = 0; k <= int(Activation::kSoftmax); ++k) {
    const auto act = static_cast<Activation>(k);
    std::vector<double> a(static_cast<size_t>(n)), dz(static_cast<size_t>(n));
    if (act == Activation::kSoftmax) {
      a = reference_softmax(z, rows, cols);
    } else {
      for (int64_t i = 0; i < n; ++i) a[i] = activate(act, z[i]);
    }
    // The backward is taken at the backend's own forward output, as the layers do.
    for (Backend* be : backends_under_test()) {
      Buffer dzbuf(*be, z);
      be->activation_forward(act, dzbuf.get(), rows, cols);
      const std::vector<float> a_be = dzbuf.host();
      expect_close(be->name() + " activation " + std::to_string(k) + " forward", a_be, a, 1e-5, 1e-6);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0;
        for (int64_t c = 0; c < cols; ++c) dot += double(d[r * cols + c]) * a_be[r * cols + c];
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          const double av = a_be[i];
          switch (act) {
            case Activation::kIdentity: dz[i] = d[i]; break;
            case Activation::kRelu: dz[i] = av > 0 ? d[i] : 0; break;
            case Activation::kLeakyRelu: dz[i] = av > 0 ? d[i] : kernels::kLeakyReluSlope * d[i]; break;
            case Activation::kTanh: dz[i] = d[i] * (1 - av * av); break;
            case Activation::kSigmoid: dz[i] = d[i] * av * (1 - av); break;
            case Activation::kSoftmax: dz[i] = av * (d[i] - dot); break;
          }
        }
      }
      Buffer dd(*be, d);
      be->activation_backward(act, dzbuf.get(), dd.get(), rows, cols);
      expect_close(be->name() + " activation " + std::to_string(k) + " backward", dd.host(), dz,
                   1e-5, 1e-6);
    }
  }
}

TEST_CASE("losses: value and delta, fused and not (rtol 1e-5)") {
  const int64_t rows = 23, cols = 10, n = rows * cols;
  auto z = random_vector(n, 9, -3.f, 3.f);
  const auto soft = reference_softmax(z, rows, cols);
  std::vector<float> probs(soft.begin(), soft.end()), onehot(static_cast<size_t>(n), 0.f);
  for (int64_t r = 0; r < rows; ++r) onehot[r * cols + (r * 7) % cols] = 1.f;
  const auto bits = random_vector(n, 10, 0.f, 1.f);
  struct Case { Loss loss; Activation act; const std::vector<float>* a; };
  std::vector<float> sig(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sig[i] = float(activate(Activation::kSigmoid, z[i]));
  const Case cases[] = {{Loss::kMcxent, Activation::kSoftmax, &probs},
                        {Loss::kXent, Activation::kSigmoid, &sig},
                        {Loss::kMse, Activation::kIdentity, &z},
                        {Loss::kMse, Activation::kTanh, &probs}};
  for (const Case& c : cases) {
    const std::vector<float>& a = *c.a;
    const std::vector<float>& y = c.loss == Loss::kXent ? bits : onehot;
    const bool fused = c.act != Activation::kIdentity && c.act != Activation::kTanh;
    double value = 0;
    std::vector<double> dz(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double p = std::min(std::max(double(a[i]), 1e-7), 1 - 1e-7);
      if (c.loss == Loss::kMcxent) value -= y[i] != 0 ? y[i] * std::log(p) : 0;
      if (c.loss == Loss::kXent) value -= y[i] * std::log(p) + (1 - y[i]) * std::log(1 - p);
      if (c.loss == Loss::kMse) value += (double(a[i]) - y[i]) * (double(a[i]) - y[i]) / cols;
      dz[i] = fused ? (double(a[i]) - y[i]) / rows : 2 * (double(a[i]) - y[i]) / cols / rows;
      if (c.act == Activation::kTanh) dz[i] *= 1 - double(a[i]) * a[i];
    }
    value /= rows;
    for (Backend* be : backends_under_test()) {
      Buffer da(*be, a), dy(*be, y), ddz(*be, n);
      kernels::LossArgs args;
      args.loss = c.loss;
      args.activation = c.act;
      args.a = da.get();
      args.targets = dy.get();
      args.rows = rows;
      args.cols = cols;
      args.dz = ddz.get();
      const double got = be->loss(args);
      INFO(be->name() << " loss " << int(c.loss) << " with activation " << int(c.act));
      CHECK(got == Approx(value).epsilon(1e-5));
      expect_close(be->name() + " loss delta", ddz.host(), dz, 1e-5, 1e-7);
    }
  }
}

}  // namespace dtrain::conformance

namespace dtrain::conformance {

TEST_CASE("scale and sum of squares (rtol 1e-6)") {
  const int64_t n = 100003;
  const auto x = random_vector(n, 12);
  std::vector<double> scaled(static_cast<size_t>(n));
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    scaled[i] = double(x[i]) * 0.375;
    squares += double(x[i]) * x[i];
  }
  for (Backend* be : backends_under_test()) {
    Buffer dx(*be, x);
    INFO(be->name());
    CHECK(be->sum_squares(dx.get(), n) == Approx(squares).epsilon(1e-9));
    be->scale(dx.get(), n, 0.375f);
    expect_close(be->name() + " scale", dx.host(), scaled, 1e-6, 0);
  }
}

TEST_CASE("clearing the elements a message sent (momentum masking; exact)") {
  const int64_t n = 16 * 20 + 5;
  const auto x = random_vector(n, 13);
  std::vector<uint32_t> bitmap(static_cast<size_t>((n + 15) / 16), 0u), sparse;
  std::vector<double> cleared(x.begin(), x.end());
  for (int64_t i = 0; i < n; i += 7) {
    bitmap[i / 16] |= (i % 2 ? 2u : 1u) << (2 * (i % 16));
    sparse.push_back(i % 2 ? uint32_t(i) | 0x80000000u : uint32_t(i));
    cleared[i] = 0.0;
  }
  for (Backend* be : backends_under_test()) {
    Buffer a(*be, x), b(*be, x);
    Buffer words = Buffer::words(*be, sparse), bits = Buffer::words(*be, bitmap);
    be->clear_sent_sparse(words.word_ptr(), int64_t(sparse.size()), a.get());
    be->clear_sent_bitmap(bits.word_ptr(), n, b.get());
    expect_close(be->name() + " clear_sent_sparse", a.host(), cleared, 0, 0);
    expect_close(be->name() + " clear_sent_bitmap", b.host(), cleared, 0, 0);
  }
}

}  // namespace dtrain::conformance
