// Causal attention over whole prompts on the CPU, as an XLA FFI handler (see kernels/__init__.py, which builds and
// registers it).
//
// pytest_reward_prefill_attention: qkv (B, T, (KV G + 2 KV) Dh) f32, the projections token-major as the matmul
// leaves them (queries, then keys, then values, head by head; rotary positions already applied), mask (B, T) pred
// (the real tokens), attributes kv_heads, head_dim, scale -> o (B, Tq, KV G Dh) f32: the attention output of the
// last Tq positions, token-major (what the output projection multiplies). Query position i of row b (T - Tq <= i
// < T) attends over the real tokens j <= i of its row:
//   o[b, i, h] = sum_j softmax_j(scale * q[b, i, h] . k[b, j, kv]) v[b, j, kv],  kv = h / G.
// A query with no real token at or before it (left padding) gets the mean of all T values of its row and head,
// which is what the XLA path computes for it (every score masked to the same finite value).
//
// Why: XLA's CPU backend computes the full T x T scores of every head, masks them and runs the softmax and the
// product with the values as separate loops over (B, KV, G, T, T) arrays (GPT-2-small's prompt of 64 tokens at
// batch 32: ~10 ms per layer; 256 tokens at batch 8: ~40 ms per layer). This gathers a row's real keys once per
// head (transposed, so a block of query rows meets sixteen keys per vector operation), computes only the scores
// of keys at or before each query, and sums the values in registers.
//
// Work is shared over XLA's intra-op pool by (row, kv head, block of query positions: as few blocks as keep the
// pool's threads busy, each of at least 64 positions, see Problem::set_chunks). Each output row is
// summed by one thread in a fixed order over its own real keys only, so it is the same bits whatever the thread
// count, the other rows of the batch, the padding before it, or the block it was computed in.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vmath.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pytest_reward::exp16;
using pytest_reward::load16;
using pytest_reward::splat;
using pytest_reward::store16;
using pytest_reward::v16;

// Query rows computed together: their scores and outputs share every load. Eight rows against three vectors of
// keys (or values) hold 24 accumulators of the 32 AVX-512 registers (GPT-2-small, 16 x 256 tokens, a layer:
// 9.8 ms with four rows against four vectors, 7.5-7.8 ms so; the same bits).
constexpr int64_t R = 8;
constexpr int64_t QC = 64;  // query positions per work item, at least (a multiple of R)
constexpr int64_t ITEMS_PER_THREAD = 8;  // enough items for the pool's threads to even out

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

struct Problem {
  const float *x;  // qkv
  const bool *mask;
  float *o;
  int64_t B, T, Tq, KV, G, Dh;
  float scale;
  int64_t qc;  // query positions per work item (set_chunks)
  int64_t C() const { return (KV * G + 2 * KV) * Dh; }
  int64_t chunks() const { return (Tq + qc - 1) / qc; }
  // As few items per (row, kv head) as keep every thread busy: each item gathers its row's keys up to its last
  // query, so a row in fewer items gathers less (GPT-2-small, 16 x 256 tokens: 10.7 -> 9.8 ms a layer in one).
  void set_chunks(int64_t threads) {
    const int64_t most = (Tq + QC - 1) / QC;  // items of QC positions
    const int64_t wanted = (ITEMS_PER_THREAD * threads + B * KV - 1) / (B * KV);
    const int64_t n = std::max<int64_t>(1, std::min(most, wanted));
    qc = ((Tq + n - 1) / n + R - 1) / R * R;
  }
  const float *row(int64_t b, int64_t t) const { return x + (b * T + t) * C(); }
};

// A worker's scratch, sized for the longest prompt: the gathered keys (transposed, Dh x np) and values (n x dp,
// zero-padded to a whole number of vectors), a block's scores and outputs, the real keys' positions and how
// many there are at or before each position.
struct Scratch {
  std::vector<float> kt, v, s, out, mean;
  std::vector<int32_t> keys;
  std::vector<int64_t> upto;
  explicit Scratch(const Problem &p)
      : kt(p.Dh * round16(p.T)), v(p.T * round16(p.Dh)), s(R * round16(p.T)), out(R * round16(p.Dh)),
        mean(p.Dh), keys(p.T), upto(p.T) {}
};

// Scores of R query rows against NJ x 16 gathered keys: s[r][j] = scale * sum_d q[r][d] kt[d][j].
template <int NJ>
inline void scores(const float *const *q, const float *kt, int64_t np, int64_t Dh, float scale, float *s,
                   int64_t ns) {
  v16 acc[R][NJ] = {};
  for (int64_t d = 0; d < Dh; ++d) {
    v16 k[NJ];
    for (int x = 0; x < NJ; ++x) k[x] = load16(kt + d * np + 16 * x);
    for (int64_t r = 0; r < R; ++r) {
      const v16 qd = splat(q[r][d]);
      for (int x = 0; x < NJ; ++x) acc[r][x] += qd * k[x];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int x = 0; x < NJ; ++x) store16(s + r * ns + 16 * x, acc[r][x] * scale);
}

// Outputs of R query rows, NV x 16 columns of the values: out[r][c] = sum_{j < n} s[r][j] v[j][c].
template <int NV>
inline void weighted_values(const float *s, int64_t ns, int64_t n, const float *v, int64_t dp, float *out) {
  v16 acc[R][NV] = {};
  for (int64_t j = 0; j < n; ++j) {
    v16 vj[NV];
    for (int x = 0; x < NV; ++x) vj[x] = load16(v + j * dp + 16 * x);
    for (int64_t r = 0; r < R; ++r) {
      const v16 w = splat(s[r * ns + j]);
      for (int x = 0; x < NV; ++x) acc[r][x] += w * vj[x];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) store16(out + r * dp + 16 * x, acc[r][x]);
}

// Softmax of scores s[0, c) in place, into weights that sum to 1; s[c, n16) set to 0 (n16 a multiple of 16).
void softmax(float *s, int64_t c, int64_t n16) {
  v16 m = splat(-INFINITY);
  const int64_t whole = c / 16 * 16;
  for (int64_t j = 0; j < whole; j += 16) {
    const v16 y = load16(s + j);
    m = y > m ? y : m;
  }
  v16 rest = splat(-INFINITY);  // the last partial vector, its lanes past c at -inf: exp gives 0
  for (int64_t j = whole; j < c; ++j) rest[j - whole] = s[j];
  m = rest > m ? rest : m;
  const float top = pytest_reward::hmax(m);
  v16 sum = {};
  for (int64_t j = 0; j < whole; j += 16) {
    const v16 e = exp16(load16(s + j) - top);
    store16(s + j, e);
    sum += e;
  }
  if (whole < c) {
    const v16 e = exp16(rest - top);
    store16(s + whole, e);
    sum += e;
  }
  const float inv = 1.0f / pytest_reward::hsum(sum);
  for (int64_t j = 0; j < c; ++j) s[j] *= inv;
  for (int64_t j = c; j < n16; ++j) s[j] = 0.0f;
}

void attend_item(const Problem &p, int64_t item, Scratch &w) {
  const int64_t chunk = item % p.chunks(), kv = item / p.chunks() % p.KV, b = item / p.chunks() / p.KV;
  const int64_t T = p.T, Dh = p.Dh, H = p.KV * p.G, dp = round16(Dh), first = T - p.Tq;
  const int64_t lo = first + chunk * p.qc, hi = std::min(lo + p.qc, T);  // this item's query positions
  const bool *mask = p.mask + b * T;
  const int64_t key_at = (H + kv) * Dh, value_at = (H + p.KV + kv) * Dh;

  // The row's real keys up to the last query, gathered: keys transposed, values padded to whole vectors.
  int64_t n = 0;
  for (int64_t t = 0; t < hi; ++t) {
    if (mask[t]) w.keys[n++] = static_cast<int32_t>(t);
    w.upto[t] = n;  // real tokens at or before t: the keys query t attends to are the first upto[t] gathered
  }
  const int64_t np = round16(n);
  float *kt = w.kt.data(), *v = w.v.data();
  for (int64_t j0 = 0; j0 < np; j0 += 16) {  // sixteen keys at a time: their rows stay in L1 while transposed
    const float *kr[16];
    for (int64_t j = 0; j < 16; ++j) kr[j] = j0 + j < n ? p.row(b, w.keys[j0 + j]) + key_at : nullptr;
    for (int64_t d = 0; d < Dh; ++d)
      for (int64_t j = 0; j < 16; ++j) kt[d * np + j0 + j] = kr[j] != nullptr ? kr[j][d] : 0.0f;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float *vr = p.row(b, w.keys[j]) + value_at;
    float *dst = v + j * dp;
    int64_t d = 0;
    for (; d + 16 <= Dh; d += 16) store16(dst + d, load16(vr + d));
    for (; d < Dh; ++d) dst[d] = vr[d];
    for (; d < dp; ++d) dst[d] = 0.0f;
  }

  bool have_mean = false;
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t h = kv * p.G + g;
    for (int64_t i0 = lo; i0 < hi; i0 += R) {
      const float *q[R];
      int64_t count[R];  // how many of the gathered keys each row attends to
      for (int64_t r = 0; r < R; ++r) {
        const int64_t i = std::min(i0 + r, hi - 1);  // past the item's end: the last row again, not written
        q[r] = p.row(b, i) + h * Dh;
        count[r] = w.upto[i];
      }
      const int64_t cm = count[R - 1], cp = round16(cm);
      float *s = w.s.data();
      const int64_t ns = round16(T);
      for (int64_t j = 0; j < cp; j += 48) {
        switch (std::min<int64_t>(3, (cp - j) / 16)) {
          case 3: scores<3>(q, kt + j, np, Dh, p.scale, s + j, ns); break;
          case 2: scores<2>(q, kt + j, np, Dh, p.scale, s + j, ns); break;
          default: scores<1>(q, kt + j, np, Dh, p.scale, s + j, ns);
        }
      }
      for (int64_t r = 0; r < R; ++r)
        if (count[r] > 0) softmax(s + r * ns, count[r], cp);
        else std::fill(s + r * ns, s + r * ns + cp, 0.0f);
      for (int64_t c = 0; c < dp; c += 48) {
        switch (std::min<int64_t>(3, (dp - c) / 16)) {
          case 3: weighted_values<3>(s, ns, cm, v + c, dp, w.out.data() + c); break;
          case 2: weighted_values<2>(s, ns, cm, v + c, dp, w.out.data() + c); break;
          default: weighted_values<1>(s, ns, cm, v + c, dp, w.out.data() + c);
        }
      }
      for (int64_t r = 0; r < R && i0 + r < hi; ++r) {
        float *dst = p.o + ((b * p.Tq + (i0 + r - first)) * H + h) * Dh;
        if (count[r] > 0) {
          const float *src = w.out.data() + r * dp;
          int64_t d = 0;
          for (; d + 16 <= Dh; d += 16) store16(dst + d, load16(src + d));
          for (; d < Dh; ++d) dst[d] = src[d];
          continue;
        }
        if (!have_mean) {  // no real token yet: the mean of all T values of the row, weights 1 / T in order
          const float each = 1.0f / static_cast<float>(T);
          std::fill(w.mean.begin(), w.mean.end(), 0.0f);
          for (int64_t t = 0; t < T; ++t) {
            const float *vr = p.row(b, t) + value_at;
            for (int64_t d = 0; d < Dh; ++d) w.mean[d] += each * vr[d];
          }
          have_mean = true;
        }
        std::copy(w.mean.begin(), w.mean.end(), dst);
      }
    }
  }
}

ffi::Error PrefillAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> qkv, ffi::Buffer<ffi::PRED> mask,
                            int64_t kv_heads, int64_t head_dim, float scale, ffi::ResultBuffer<ffi::F32> o) {
  const auto dx = qkv.dimensions(), dm = mask.dimensions(), dout = o->dimensions();
  if (dx.size() != 3 || dm.size() != 2 || dout.size() != 3)
    return ffi::Error::InvalidArgument("prefill attention: qkv must be rank 3, mask rank 2 and the output rank 3");
  const int64_t B = dx[0], T = dx[1], KV = kv_heads, Dh = head_dim, Tq = dout[1];
  if (dm[0] != B || dm[1] != T) return ffi::Error::InvalidArgument("prefill attention: mask must be (B, T)");
  if (KV <= 0 || Dh <= 0 || dout[2] % (KV * Dh) != 0 || dout[2] == 0)
    return ffi::Error::InvalidArgument("prefill attention: the output width must be KV G Dh, G >= 1");
  const int64_t G = dout[2] / (KV * Dh);
  if (dx[2] != (KV * G + 2 * KV) * Dh)
    return ffi::Error::InvalidArgument("prefill attention: qkv must be (B, T, (KV G + 2 KV) Dh)");
  if (dout[0] != B || Tq > T)
    return ffi::Error::InvalidArgument("prefill attention: the output must be (B, Tq, KV G Dh) with Tq <= T");
  Problem p{qkv.typed_data(), mask.typed_data(), o->typed_data(), B, T, Tq, KV, G, Dh, scale, QC};
  p.set_chunks(pool.num_threads());
  const int64_t items = B * KV * p.chunks();
  if (items == 0) return ffi::Error::Success();
  pytest_reward::parallel_for(pool, items, items, [&p] {
    auto scratch = std::make_shared<Scratch>(p);
    return [&p, scratch](int64_t item) { attend_item(p, item, *scratch); };
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(pytest_reward_prefill_attention, PrefillAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // qkv
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // mask
                                  .Attr<int64_t>("kv_heads")
                                  .Attr<int64_t>("head_dim")
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());  // o
