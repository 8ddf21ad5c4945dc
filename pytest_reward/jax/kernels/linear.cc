// A decode step's weight matmuls on the CPU, as an XLA FFI handler (see kernels/__init__.py, which builds and
// registers it).
//
//   pytest_reward_linear_packed: w (P, K, 12) f32, the (N, K) weight matrix packed in panels of 12 rows
//   (kernels.pack_rows: w[p, k, r] = W[12 p + r, k], rows past N zero), x (K, B) f32, bias (N,) f32
//   -> out (N, B) f32 = W x + bias[:, None].
//
// Why: a decode step multiplies a few activation columns (B, the batch) by every weight matrix of the model, and
// XLA's CPU matmul of the (N, K) matrix by them reached ~115 GFLOP/s at the 6-layer d384 model's widths at batch
// 32 (bench/bench_matmul.py: its 24 matrices, read from memory, in one program: 5.9 ms), where two cores peak at
// ~210. Here the weights are packed once per parameter set so that a panel's twelve rows are read as one
// sequential stream, k by k (with a prefetch 64 k ahead), and a register block of 12 rows x 32 columns (24 vector
// accumulators with AVX-512) stays in registers for the whole of K: per k, two loads of x, twelve broadcasts of
// weights and 24 fused multiply-adds (3.9 ms for the same 24 matrices). The columns go in blocks of 32, then one
// of 16 or 8 (x is copied with its rows zero-padded to that width); panels are shared out over XLA's intra-op
// thread pool.
//
// Each output element is summed by one thread over k in increasing order, bias last: the result does not depend on
// the thread count or on the other columns of x (a row of a batch gives the same bits alone or beside others).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vmath.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pytest_reward::v16;

constexpr int64_t kPanel = 12;  // rows per panel: kernels.PANEL_ROWS

#if defined(__AVX512F__)
constexpr int kRows = 12;  // 12 rows x 2 vectors: 24 of the 32 vector registers
#else
constexpr int kRows = 3;  // a v16 is two AVX2 registers: 3 rows x 2 vectors x 2 = 12 of 16
#endif
static_assert(kPanel % kRows == 0, "a register block divides a panel");

typedef float v8 __attribute__((vector_size(32), aligned(4)));

// Loads, stores and broadcasts of one vector type: V is v16 (sixteen columns) or v8 (eight, for a batch's last
// few columns: half the work of a v16 that would be half padding).
template <typename V>
struct Lanes {
  static constexpr int64_t n = sizeof(V) / sizeof(float);
  static V load(const float *p) {
    V r;
    __builtin_memcpy(&r, p, sizeof r);
    return r;
  }
  static V splat(float x) {  // an initializer list, one broadcast instruction (a loop over lanes is not)
    if constexpr (n == 16) return pytest_reward::splat(x);
    else return V{x, x, x, x, x, x, x, x};
  }
  static void store(float *p, V x, int64_t lanes) {  // the first `lanes` (all of them if lanes >= n)
    if (lanes >= n) return __builtin_memcpy(p, &x, sizeof x), void();
    for (int64_t j = 0; j < lanes; ++j) p[j] = x[j];
  }
};

// Rows [r0, r0 + kRows) of panel w (K x kPanel) times columns [c, c + n NV) of xs (K x Bp, zero-padded), plus
// the bias; `rows` (<= kRows) rows and `lanes` columns are stored to out (row r0 + i at out + i * B).
template <typename V, int NV>
void block(const float *__restrict w, int64_t r0, const float *__restrict xs, const float *__restrict bias,
           float *__restrict out, int64_t K, int64_t Bp, int64_t B, int64_t c, int64_t lanes, int64_t rows) {
  using L = Lanes<V>;
  V acc[kRows][NV];
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t k = 0; k < K; ++k) {
    const float *xk = xs + k * Bp + c;
    V xv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) xv[v] = L::load(xk + L::n * v);
    const float *wk = w + k * kPanel + r0;
    __builtin_prefetch(wk + 64 * kPanel);  // the panel 3 KB ahead: ~1.3x over the hardware prefetcher alone
#pragma GCC unroll 16
    for (int i = 0; i < kRows; ++i) {
      const V wi = L::splat(wk[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += wi * xv[v];
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const V b = L::splat(bias[i]);
    for (int v = 0; v < NV; ++v) L::store(out + i * B + c + L::n * v, acc[i][v] + b, lanes - L::n * v);
  }
}

struct Problem {
  const float *w, *xs, *bias;
  float *out;
  int64_t N, K, B, Bp;  // Bp: the row length of xs, B rounded up to 8 or 16 (padded_columns)
};

// B rounded up so that the columns split into blocks of 32, then one of 16 or 8.
inline int64_t padded_columns(int64_t B) {
  const int64_t rest = B % 32;
  return B - rest + (rest == 0 ? 0 : rest <= 8 ? 8 : rest <= 16 ? 16 : 32);
}

// Panels [p0, p1): all of their rows below N, all columns.
void panels(const Problem &m, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const float *w = m.w + p * m.K * kPanel;
    for (int64_t r0 = 0; r0 < kPanel; r0 += kRows) {
      const int64_t row = p * kPanel + r0;
      if (row >= m.N) break;
      const int64_t rows = std::min<int64_t>(kRows, m.N - row);
      float *out = m.out + row * m.B;
      const float *bias = m.bias + row;
      for (int64_t c = 0; c < m.Bp;) {
        const int64_t width = std::min<int64_t>(32, m.Bp - c), lanes = std::min(width, m.B - c);
        if (width == 32) block<v16, 2>(w, r0, m.xs, bias, out, m.K, m.Bp, m.B, c, lanes, rows);
        else if (width == 16) block<v16, 1>(w, r0, m.xs, bias, out, m.K, m.Bp, m.B, c, lanes, rows);
        else block<v8, 1>(w, r0, m.xs, bias, out, m.K, m.Bp, m.B, c, lanes, rows);
        c += width;
      }
    }
  }
}

ffi::Error LinearPacked(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> w, ffi::Buffer<ffi::F32> x,
                        ffi::Buffer<ffi::F32> bias, ffi::ResultBuffer<ffi::F32> out) {
  const auto dw = w.dimensions(), dx = x.dimensions(), db = bias.dimensions(), dout = out->dimensions();
  if (dw.size() != 3 || dw[2] != kPanel)
    return ffi::Error::InvalidArgument("linear: w must be packed (P, K, 12) (kernels.pack_rows)");
  if (dx.size() != 2 || dx[0] != dw[1])
    return ffi::Error::InvalidArgument("linear: x must be (K, B) with K the width of w's rows");
  if (db.size() != 1) return ffi::Error::InvalidArgument("linear: bias must be (N,)");
  const int64_t P = dw[0], K = dw[1], B = dx[1], N = db[0];
  if (N > P * kPanel || N <= (P - 1) * kPanel)
    return ffi::Error::InvalidArgument("linear: w's panels must hold exactly ceil(N / 12) of the bias's N rows");
  if (dout.size() != 2 || dout[0] != N || dout[1] != B)
    return ffi::Error::InvalidArgument("linear: the result must be (N, B)");
  if (N == 0 || B == 0) return ffi::Error::Success();
  // x with its rows zero-padded to Bp columns, so that every load of x is a whole vector.
  const int64_t Bp = padded_columns(B);
  std::vector<float> xs;
  const float *xp = x.typed_data();
  if (Bp != B) {
    xs.assign(K * Bp, 0.0f);
    for (int64_t k = 0; k < K; ++k) std::copy(xp + k * B, xp + (k + 1) * B, xs.begin() + k * Bp);
    xp = xs.data();
  }
  const Problem m{w.typed_data(), xp, bias.typed_data(), out->typed_data(), N, K, B, Bp};
  // Items of a few panels each; one thread below ~1 MFLOP of work, where a helper costs more than it saves.
  const int64_t per_item = std::max<int64_t>(1, P / (4 * std::max<int64_t>(1, pool.num_threads())));
  const int64_t items = (P + per_item - 1) / per_item;
  const int64_t threads = 2 * N * K * B < (int64_t{1} << 20) ? 1 : items;
  pytest_reward::parallel_for(pool, items, threads, [&] {
    return [&](int64_t i) { panels(m, i * per_item, std::min(P, (i + 1) * per_item)); };
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(pytest_reward_linear_packed, LinearPacked,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
