// Conformance: dropout, batch normalisation, global pooling, convolution and pooling.
#include "kernels/random_bits.h"
#include "tests/conformance/backend_fixture.h"

namespace dtrain::conformance {
namespace {

struct ConvCase {
  kernels::ConvGeometry g;
  std::vector<float> x, w, bias, dy;
};

ConvCase conv_case() {
  ConvCase c;
  c.g.batch = 3;
  c.g.in_channels = 4;
  c.g.in_h = 11;
  c.g.in_w = 9;
  c.g.out_channels = 5;
  c.g.window = {3, 3, 2, 1, 1, 1};  // 3x3 kernel, stride 2 down, 1 across, padding 1
  const int64_t in = c.g.batch * c.g.in_channels * c.g.in_h * c.g.in_w;
  const int64_t out = c.g.batch * c.g.out_channels * c.g.out_h() * c.g.out_w();
  c.x = random_vector(in, 31);
  c.w = random_vector(c.g.out_channels * c.g.in_channels * 9, 32);
  c.bias = random_vector(c.g.out_channels, 33);
  c.dy = random_vector(out, 34);
  return c;
}

// Visits every (output element, input element, weight) triple of the convolution.
template <typename F>
void for_each_tap(const kernels::ConvGeometry& g, F f) {
  const auto& w = g.window;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oy = 0; oy < g.out_h(); ++oy)
        for (int64_t ox = 0; ox < g.out_w(); ++ox) {
          const int64_t out = ((b * g.out_channels + o) * g.out_h() + oy) * g.out_w() + ox;
          for (int64_t i = 0; i < g.in_channels; ++i)
            for (int64_t ky = 0; ky < w.kernel_h; ++ky)
              for (int64_t kx = 0; kx < w.kernel_w; ++kx) {
                const int64_t iy = oy * w.stride_h - w.pad_h + ky, ix = ox * w.stride_w - w.pad_w + kx;
                if (iy < 0 || iy >= g.in_h || ix < 0 || ix >= g.in_w) continue;
                f(out, ((b * g.in_channels + i) * g.in_h + iy) * g.in_w + ix,
                  ((o * g.in_channels + i) * w.kernel_h + ky) * w.kernel_w + kx, o);
              }
        }
}
}  // namespace

TEST_CASE("dropout: the counter-based mask, scaled by 1 / (1 - rate) (exact)") {
  const int64_t n = 5000;
  const float rate = 0.3f;
  const uint64_t seed = 0x5eed;
  const auto x = random_vector(n, 41);
  std::vector<double> mask(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = kernels::uniform_at(seed, uint64_t(i)) >= rate ? 1.0 / (1.0 - rate) : 0.0;
    dropped += mask[i] == 0.0;
    out[i] = x[i] * mask[i];
  }
  CHECK(dropped > n * 0.27);  // the mask really drops about `rate` of the units
  CHECK(dropped < n * 0.33);
  for (Backend* be : backends_under_test()) {
    Buffer dx(*be, x), dout(*be, n), dmask(*be, n);
    be->dropout_forward(dx.get(), dout.get(), dmask.get(), n, rate, seed);
    expect_close(be->name() + " dropout mask", dmask.host(), mask, 1e-6, 0);
    expect_close(be->name() + " dropout output", dout.host(), out, 1e-6, 0);
  }
}

namespace {

struct BatchNormCase {
  int64_t batch = 6, channels = 3, plane = 20;
  std::vector<float> x, dy, gamma, beta, rmean, rvar;
  int64_t n() const { return batch * channels * plane; }
};

BatchNormCase batch_norm_case(int64_t channels) {
  BatchNormCase k;
  k.channels = channels;
  k.x = random_vector(k.n(), 51, -2.f, 3.f);
  k.dy = random_vector(k.n(), 52);
  k.gamma = random_vector(channels, 53, 0.5f, 1.5f);
  k.beta = random_vector(channels, 54);
  k.rmean = random_vector(channels, 55);
  k.rvar = random_vector(channels, 56, 0.5f, 2.f);
  return k;
}

struct BatchNormResult {
  std::vector<double> y, dx, dgamma, dbeta, new_mean, new_var;
};

constexpr float kBnEps = 1e-5f, kBnDecay = 0.9f;

BatchNormResult batch_norm_reference(const BatchNormCase& k, bool training) {
  const int64_t channels = k.channels, plane = k.plane, batch = k.batch;
  BatchNormResult r{std::vector<double>(size_t(k.n())), std::vector<double>(size_t(k.n())),
                    std::vector<double>(size_t(channels)), std::vector<double>(size_t(channels)),
                    std::vector<double>(size_t(channels)), std::vector<double>(size_t(channels))};
  const double count = double(batch * plane);
  for (int64_t c = 0; c < channels; ++c) {
    double mean = 0, var = 0;
    auto at = [&](int64_t b, int64_t j) { return (b * channels + c) * plane + j; };
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < plane; ++j) mean += k.x[at(b, j)] / count;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < plane; ++j) var += (k.x[at(b, j)] - mean) * (k.x[at(b, j)] - mean) / count;
    r.new_mean[c] = training ? kBnDecay * k.rmean[c] + (1 - kBnDecay) * mean : k.rmean[c];
    r.new_var[c] = training ? kBnDecay * k.rvar[c] + (1 - kBnDecay) * var * count / (count - 1)
                            : k.rvar[c];
    if (!training) {
      mean = k.rmean[c];
      var = k.rvar[c];
    }
    const double inv_std = 1 / std::sqrt(var + kBnEps);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < plane; ++j) {
        const double xhat = (k.x[at(b, j)] - mean) * inv_std;
        r.y[at(b, j)] = k.gamma[c] * xhat + k.beta[c];
        sum_dy += k.dy[at(b, j)];
        sum_dy_xhat += k.dy[at(b, j)] * xhat;
      }
    r.dgamma[c] = sum_dy_xhat;
    r.dbeta[c] = sum_dy;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < plane; ++j) {
        const double xhat = (k.x[at(b, j)] - mean) * inv_std;
        r.dx[at(b, j)] = training ? k.gamma[c] * inv_std *
                                        (k.dy[at(b, j)] - sum_dy / count - xhat * sum_dy_xhat / count)
                                  : k.gamma[c] * inv_std * k.dy[at(b, j)];
      }
  }
  return r;
}

// The index of NCHW element i in the blocked layout with channel block `block` (op_args.h).
int64_t blocked_index(const BatchNormCase& k, int64_t i, int64_t block) {
  if (block == 0) return i;
  const int64_t j = i % k.plane, c = (i / k.plane) % k.channels, b = i / (k.plane * k.channels);
  return ((b * (k.channels / block) + c / block) * k.plane + j) * block + c % block;
}

template <typename T>
std::vector<T> to_layout(const BatchNormCase& k, const std::vector<T>& plain, int64_t block) {
  std::vector<T> out(plain.size());
  for (int64_t i = 0; i < int64_t(plain.size()); ++i) out[size_t(blocked_index(k, i, block))] = plain[size_t(i)];
  return out;
}

template <typename T>
std::vector<T> from_layout(const BatchNormCase& k, const std::vector<T>& laid, int64_t block) {
  std::vector<T> out(laid.size());
  for (int64_t i = 0; i < int64_t(laid.size()); ++i) out[size_t(i)] = laid[size_t(blocked_index(k, i, block))];
  return out;
}

// `far`: the inputs sit near 100, where float's own rounding of x - mean (an ulp of 100 is 8e-6)
// bounds what any float kernel can match, so the absolute tolerances are 100 times wider.
void check_batch_norm(Backend* be, const BatchNormCase& k, bool training, int64_t block,
                      bool far = false) {
  const double at = far ? 100.0 : 1.0;
  const BatchNormResult r = batch_norm_reference(k, training);
  Buffer dxb(*be, to_layout(k, k.x, block)), dyb(*be, to_layout(k, k.dy, block)),
      g(*be, k.gamma), bt(*be, k.beta), rm(*be, k.rmean), rv(*be, k.rvar), sm(*be, k.channels),
      si(*be, k.channels), out(*be, k.n()), dxo(*be, k.n()), dg(*be, k.channels),
      db(*be, k.channels);
  kernels::BatchNormArgs a;
  a.batch = k.batch;
  a.channels = k.channels;
  a.plane = k.plane;
  a.block = block;
  a.eps = kBnEps;
  a.decay = kBnDecay;
  a.training = training;
  a.x = dxb.get();
  a.y = out.get();
  a.gamma = g.get();
  a.beta = bt.get();
  a.running_mean = rm.get();
  a.running_var = rv.get();
  a.save_mean = sm.get();
  a.save_inv_std = si.get();
  a.dy = dyb.get();
  a.dx = dxo.get();
  a.dgamma = dg.get();
  a.dbeta = db.get();
  be->batch_norm_forward(a);
  be->batch_norm_backward(a);
  const std::string what = be->name() + (training ? " batch norm training" : " batch norm inference") +
                           ", " + std::to_string(k.channels) + " channels, block " + std::to_string(block);
  expect_close(what + " y", from_layout(k, out.host(), block), r.y, 1e-4, 1e-5 * at);
  expect_close(what + " running mean", rm.host(), r.new_mean, 1e-5, 1e-6 * at);
  expect_close(what + " running variance", rv.host(), r.new_var, 1e-5, 1e-6 * at);
  expect_close(what + " dx", from_layout(k, dxo.host(), block), r.dx, 1e-4, 1e-5 * at);
  expect_close(what + " dgamma", dg.host(), r.dgamma, 1e-4, 1e-5 * at);
  expect_close(what + " dbeta", db.host(), r.dbeta, 1e-5, 1e-5 * at);
}

}  // namespace

TEST_CASE("batch norm: training and inference, forward and backward (rtol 1e-4)") {
  const BatchNormCase k = batch_norm_case(3);
  for (bool training : {true, false})
    for (Backend* be : backends_under_test()) check_batch_norm(be, k, training, 0);
}

// The layout the CPU backend keeps activations in between convolutions (op_args.h): both
// blocks, on every backend that uses one.
// A second case sits far from zero (mean ~100, spread ~1.4): the one-pass moments of the blocked
// kernel (taken around each channel's first value) hold there too.
TEST_CASE("batch norm on channel-blocked activations (rtol 1e-4)") {
  BatchNormCase far = batch_norm_case(32);
  for (float& v : far.x) v += 100.f;
  for (bool is_far : {false, true})
    for (Backend* be : backends_under_test()) {
      if (be->activation_block() == 0) continue;  // plain NCHW only (a GPU)
      for (int64_t block : {8, 16})
        for (bool training : {true, false})
          check_batch_norm(be, is_far ? far : batch_norm_case(32), training, block, is_far);
    }
}

TEST_CASE("global pooling: max and average, forward and backward (rtol 1e-6)") {
  const int64_t planes = 14, plane = 25, n = planes * plane;
  const auto x = random_vector(n, 61), dout = random_vector(planes, 62);
  for (bool max : {true, false}) {
    std::vector<double> out(planes), din(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < planes; ++i) {
      int64_t best = 0;
      double sum = 0;
      for (int64_t j = 0; j < plane; ++j) {
        sum += x[i * plane + j];
        if (x[i * plane + j] > x[i * plane + best]) best = j;
      }
      out[i] = max ? x[i * plane + best] : sum / plane;
      for (int64_t j = 0; j < plane; ++j)
        din[i * plane + j] = max ? (j == best ? dout[i] : 0.0) : dout[i] / plane;
    }
    for (Backend* be : backends_under_test()) {
      Buffer dx(*be, x), dd(*be, dout), o(*be, planes), di(*be, n);
      be->global_pool_forward(dx.get(), o.get(), planes, plane, max);
      be->global_pool_backward(dx.get(), dd.get(), di.get(), planes, plane, max);
      expect_close(be->name() + (max ? " global max" : " global average"), o.host(), out, 1e-6, 1e-7);
      expect_close(be->name() + (max ? " global max backward" : " global average backward"),
                   di.host(), din, 1e-6, 1e-7);
    }
  }
}

TEST_CASE("convolution: forward, backward data, backward weights, strided and padded (rtol 1e-4)") {
  ConvCase c = conv_case();
  const auto& g = c.g;
  const int64_t out_n = int64_t(c.dy.size());
  std::vector<double> y(static_cast<size_t>(out_n)), dx(c.x.size(), 0.0), dw(c.w.size(), 0.0),
      db(static_cast<size_t>(g.out_channels), 0.0);
  for (int64_t i = 0; i < out_n; ++i) y[i] = c.bias[(i / (g.out_h() * g.out_w())) % g.out_channels];
  for_each_tap(g, [&](int64_t out, int64_t in, int64_t wi, int64_t) {
    y[out] += double(c.x[in]) * c.w[wi];
    dx[in] += double(c.dy[out]) * c.w[wi];
    dw[wi] += double(c.dy[out]) * c.x[in];
  });
  for (int64_t i = 0; i < out_n; ++i) db[(i / (g.out_h() * g.out_w())) % g.out_channels] += c.dy[i];
  for (Backend* be : backends_under_test()) {
    auto kernel = be->make_conv2d(g);
    Buffer x(*be, c.x), w(*be, c.w), b(*be, c.bias), dy(*be, c.dy), out(*be, out_n),
        dxo(*be, int64_t(c.x.size())), dwo(*be, int64_t(c.w.size())), dbo(*be, g.out_channels);
    kernel->forward(x.get(), w.get(), b.get(), out.get());
    kernel->backward_data(dy.get(), w.get(), dxo.get());
    kernel->backward_weights(x.get(), dy.get(), dwo.get(), dbo.get());
    expect_close(be->name() + " conv forward", out.host(), y, 1e-4, 1e-5);
    expect_close(be->name() + " conv backward data", dxo.host(), dx, 1e-4, 1e-5);
    expect_close(be->name() + " conv backward weights", dwo.host(), dw, 1e-4, 1e-5);
    expect_close(be->name() + " conv backward bias", dbo.host(), db, 1e-4, 1e-5);
  }
}

TEST_CASE("pooling: max and average, forward and backward (rtol 1e-6)") {
  for (bool max : {true, false}) {
    kernels::PoolGeometry g;
    g.batch = 2;
    g.channels = 3;
    g.in_h = 8;
    g.in_w = 7;
    g.window = {2, 3, 2, 2, 0, 0};
    g.max = max;
    const int64_t in_n = g.batch * g.channels * g.in_h * g.in_w;
    const int64_t out_n = g.batch * g.channels * g.out_h() * g.out_w();
    const auto x = random_vector(in_n, 71), dy = random_vector(out_n, 72);
    std::vector<double> y(static_cast<size_t>(out_n)), dx(static_cast<size_t>(in_n), 0.0);
    for (int64_t p = 0; p < g.batch * g.channels; ++p)
      for (int64_t oy = 0; oy < g.out_h(); ++oy)
        for (int64_t ox = 0; ox < g.out_w(); ++ox) {
          const int64_t o = (p * g.out_h() + oy) * g.out_w() + ox;
          int64_t best = -1;
          double sum = 0;
          const int64_t taps = g.window.kernel_h * g.window.kernel_w;
          for (int64_t ky = 0; ky < g.window.kernel_h; ++ky)
            for (int64_t kx = 0; kx < g.window.kernel_w; ++kx) {
              const int64_t i = (p * g.in_h + oy * g.window.stride_h + ky) * g.in_w +
                                ox * g.window.stride_w + kx;
              sum += x[i];
              if (best < 0 || x[i] > x[best]) best = i;
              if (!max) dx[i] += double(dy[o]) / taps;
            }
          y[o] = max ? x[best] : sum / taps;
          if (max) dx[best] += dy[o];
        }
    for (Backend* be : backends_under_test()) {
      auto kernel = be->make_pool2d(g);
      Buffer dxb(*be, x), dyb(*be, dy), out(*be, out_n), dxo(*be, in_n);
      kernel->forward(dxb.get(), out.get());
      kernel->backward(dyb.get(), dxo.get());
      expect_close(be->name() + (max ? " max pool" : " average pool"), out.host(), y, 1e-6, 1e-6);
      expect_close(be->name() + (max ? " max pool backward" : " average pool backward"),
                   dxo.host(), dx, 1e-6, 1e-6);
    }
  }
}

}  // namespace dtrain::conformance
