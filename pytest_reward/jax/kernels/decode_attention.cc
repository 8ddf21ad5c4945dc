// Decode attention on the CPU, as XLA FFI handlers (see kernels/__init__.py, which builds and registers them).
//
// One query token per row attends over the row's valid cache slots:
//   o[b, kv, g] = sum_s softmax_s(scale * q[b, kv, g] . k[b, kv, s] over valid s) * v[b, kv, s]
// with k and v (B, KV, S, Dh) f32 and valid (B, S) pred. A row with no valid slot gets the mean of all its
// values, which is what the XLA path computes for it (every score masked to the same finite value gives uniform
// weights).
//
// pytest_reward_decode_attention: q (B, KV, G, Dh) f32, k, v, valid, attribute scale -> o (B, KV, G, Dh) f32.
//
// pytest_reward_decode_attention_update, what a decode step calls: qkv ((KV G + 2 KV) Dh, B) f32, the step's
// query, key and value projections feature-major as its matmul leaves them (queries, then keys, then values; head
// by head), slot (B,) s32, k, v (aliased to the outputs: updated in place), valid, scale -> o (KV G Dh, B) f32
// feature-major (what the output projection multiplies), k, v. Row b's key and value go to slot[b] (a slot
// outside [0, S) writes nothing) before it attends. So a step needs neither a separate write of the cache (a
// scatter or dynamic-update-slice) nor the transposes of the projections into (B, ...) and back: together ~1 ms
// per GPT-2-small step at batch 32.
//
// Why: XLA's CPU backend runs these two batched matrix-vector products at ~20 GB/s of a machine that streams
// 27 GB/s on one core; this reads each key and value row once, in order, skipping invalid slots, and splits the
// (b, kv) pairs over XLA's intra-op thread pool, each pair's rows written and read by one thread. The sums are in
// float32 in a fixed order per (b, kv, g), so the result does not depend on the thread count or on which other
// rows are in the batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vmath.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pytest_reward::exp16;
using pytest_reward::hsum;
using pytest_reward::load16;
using pytest_reward::store16;
using pytest_reward::v16;

// Where element (b, head, d) of a per-head tensor (q, o: head = kv G + g; the new keys and values: head = kv)
// lies: base + b * sb + head * sh + d * sd.
struct Layout {
  int64_t sb, sh, sd;
  int64_t at(int64_t b, int64_t head, int64_t d) const { return b * sb + head * sh + d * sd; }
};

struct Problem {
  const float *q, *k, *v;
  const bool *valid;
  float *o;
  int64_t B, KV, G, S, Dh;
  float scale;
  Layout qo;  // of q and of o
  // With an update: this token's key and value rows and the slot each row writes them to.
  const float *k_new = nullptr, *v_new = nullptr;
  Layout kv_new{};
  const int32_t *slot = nullptr;
};

// A worker's scratch: the pair's queries and outputs gathered contiguous, its scores and valid slots.
struct Scratch {
  std::vector<float> q, o, scores;
  std::vector<int32_t> slots;
  explicit Scratch(const Problem &p) : q(p.G * p.Dh), o(p.G * p.Dh), scores(p.G * p.S), slots(p.S) {}
};

// One (b, kv) pair. DH > 0: the head width known at compile time (a multiple of 16); DH == 0: any width.
// Q and O: the pair's G queries and outputs, contiguous.
template <int DH>
void attend_pair(const Problem &p, int64_t item, const float *__restrict Q, float *__restrict O,
                 float *__restrict scores, int32_t *__restrict slots) {
  const int64_t dh = DH > 0 ? DH : p.Dh;
  const int64_t nv = dh / 16, tail = nv * 16;
  const int64_t b = item / p.KV, S = p.S, G = p.G;
  const bool *valid = p.valid + b * S;
  int64_t n = 0;
  for (int64_t s = 0; s < S; ++s)
    if (valid[s]) slots[n++] = static_cast<int32_t>(s);
  const bool none = n == 0;
  if (none)
    for (int64_t s = 0; s < S; ++s) slots[n++] = static_cast<int32_t>(s);
  const float *__restrict K = p.k + item * S * dh;
  const float *__restrict V = p.v + item * S * dh;

  for (int64_t g = 0; g < G; ++g) {
    float *sc = scores + g * S;
    if (none) {
      for (int64_t i = 0; i < n; ++i) sc[i] = 1.0f / static_cast<float>(n);
      continue;
    }
    const float *qg = Q + g * dh;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const float *kr = K + slots[i] * dh;
      if (g == 0) {  // the first pass over the keys asks for the keys a few rows on and for this row's values:
        // two streams in flight instead of one, and the value pass below finds its rows in cache (~5 % faster
        // at GPT-2-small's shapes; each pair's rows are 24 KB, short for the hardware prefetcher to ramp up on)
        if (i + 4 < n) {
          const char *next = reinterpret_cast<const char *>(K + slots[i + 4] * dh);
          for (int64_t l = 0; l < dh * 4; l += 64) __builtin_prefetch(next + l);
        }
        const char *value = reinterpret_cast<const char *>(V + slots[i] * dh);
        for (int64_t l = 0; l < dh * 4; l += 64) __builtin_prefetch(value + l);
      }
      v16 acc0 = {}, acc1 = {};  // two chains of multiply-adds instead of one
      int64_t j = 0;
      for (; j + 2 <= nv; j += 2) {
        acc0 += load16(qg + 16 * j) * load16(kr + 16 * j);
        acc1 += load16(qg + 16 * j + 16) * load16(kr + 16 * j + 16);
      }
      if (j < nv) acc0 += load16(qg + 16 * j) * load16(kr + 16 * j);
      float x = hsum(acc0 + acc1);
      for (int64_t d = tail; d < dh; ++d) x += qg[d] * kr[d];
      x *= p.scale;
      sc[i] = x;
      m = x > m ? x : m;
    }
    v16 sum = {};  // the exponentials sixteen at a time (the last vector's lanes past n at -inf give 0)
    for (int64_t i = 0; i < n; i += 16) {
      v16 e = pytest_reward::splat(-INFINITY);
      if (i + 16 <= n) e = load16(sc + i);
      else for (int64_t j = i; j < n; ++j) e[j - i] = sc[j];
      e = exp16(e - m);
      if (i + 16 <= n) store16(sc + i, e);
      else for (int64_t j = i; j < n; ++j) sc[j] = e[j - i];
      sum += e;
    }
    const float inv = 1.0f / hsum(sum);
    for (int64_t i = 0; i < n; ++i) sc[i] *= inv;
  }

  // Values: each row read once, in slot order, into accumulators (registers when the width is known).
  for (int64_t g = 0; g < G; ++g) {
    const float *sc = scores + g * S;
    float *og = O + g * dh;
    if constexpr (DH > 0) {
      v16 acc[DH / 16] = {};
      for (int64_t i = 0; i < n; ++i) {
        const float *vr = V + slots[i] * DH;
        const float w = sc[i];
        for (int j = 0; j < DH / 16; ++j) acc[j] += w * load16(vr + 16 * j);
      }
      for (int j = 0; j < DH / 16; ++j) store16(og + 16 * j, acc[j]);
    } else {
      for (int64_t d = 0; d < dh; ++d) og[d] = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float *vr = V + slots[i] * dh;
        const float w = sc[i];
        for (int64_t j = 0; j < nv; ++j) store16(og + 16 * j, load16(og + 16 * j) + w * load16(vr + 16 * j));
        for (int64_t d = tail; d < dh; ++d) og[d] += w * vr[d];
      }
    }
  }
}

void attend_item(const Problem &p, int64_t item, Scratch &w) {
  const int64_t b = item / p.KV, kv = item % p.KV, Dh = p.Dh;
  if (p.slot != nullptr) {  // the cache is this call's output (aliased): this pair's rows are this thread's
    const int64_t s = p.slot[b];
    if (s >= 0 && s < p.S) {
      float *kr = const_cast<float *>(p.k) + (item * p.S + s) * Dh;
      float *vr = const_cast<float *>(p.v) + (item * p.S + s) * Dh;
      for (int64_t d = 0; d < Dh; ++d) {
        kr[d] = p.k_new[p.kv_new.at(b, kv, d)];
        vr[d] = p.v_new[p.kv_new.at(b, kv, d)];
      }
    }
  }
  for (int64_t g = 0; g < p.G; ++g)
    for (int64_t d = 0; d < Dh; ++d) w.q[g * Dh + d] = p.q[p.qo.at(b, kv * p.G + g, d)];
  float *q = w.q.data(), *o = w.o.data(), *scores = w.scores.data();
  int32_t *slots = w.slots.data();
  switch (Dh) {
    case 32: attend_pair<32>(p, item, q, o, scores, slots); break;
    case 64: attend_pair<64>(p, item, q, o, scores, slots); break;
    case 128: attend_pair<128>(p, item, q, o, scores, slots); break;
    default: attend_pair<0>(p, item, q, o, scores, slots);
  }
  for (int64_t g = 0; g < p.G; ++g)
    for (int64_t d = 0; d < Dh; ++d) p.o[p.qo.at(b, kv * p.G + g, d)] = o[g * Dh + d];
}

// The shapes of k and v (B, KV, S, Dh) and valid (B, S).
ffi::Error check_cache(ffi::Buffer<ffi::F32> &k, ffi::Buffer<ffi::F32> &v, ffi::Buffer<ffi::PRED> &valid) {
  const auto dk = k.dimensions(), dv = v.dimensions(), dvalid = valid.dimensions();
  if (dk.size() != 4 || dv.size() != 4 || dvalid.size() != 2)
    return ffi::Error::InvalidArgument("decode attention: k, v must be rank 4 and valid rank 2");
  if (!std::equal(dk.begin(), dk.end(), dv.begin()) || dvalid[0] != dk[0] || dvalid[1] != dk[2])
    return ffi::Error::InvalidArgument("decode attention: shapes of k, v and valid disagree");
  return ffi::Error::Success();
}

void run(ffi::ThreadPool &pool, const Problem &p) {
  if (p.B * p.KV == 0 || p.S == 0) return;
  pytest_reward::parallel_for(pool, p.B * p.KV, p.B * p.KV, [&p] {
    auto scratch = std::make_shared<Scratch>(p);
    return [&p, scratch](int64_t item) { attend_item(p, item, *scratch); };
  });
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                           ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::PRED> valid, float scale,
                           ffi::ResultBuffer<ffi::F32> o) {
  if (ffi::Error e = check_cache(k, v, valid); e.failure()) return e;
  const auto dq = q.dimensions(), dk = k.dimensions();
  if (dq.size() != 4) return ffi::Error::InvalidArgument("decode attention: q must be rank 4 (B, KV, G, Dh)");
  const int64_t B = dk[0], KV = dk[1], S = dk[2], Dh = dk[3], G = dq[2];
  if (dq[0] != B || dq[1] != KV || dq[3] != Dh)
    return ffi::Error::InvalidArgument("decode attention: shapes of q, k, v and valid disagree");
  const Layout qo{KV * G * Dh, Dh, 1};
  run(pool, Problem{q.typed_data(), k.typed_data(), v.typed_data(), valid.typed_data(), o->typed_data(), B, KV, G,
                    S, Dh, scale, qo});
  return ffi::Error::Success();
}

ffi::Error DecodeAttentionUpdate(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> qkv, ffi::Buffer<ffi::S32> slot,
                                 ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::PRED> valid,
                                 float scale, ffi::ResultBuffer<ffi::F32> o, ffi::ResultBuffer<ffi::F32> k_out,
                                 ffi::ResultBuffer<ffi::F32> v_out) {
  if (ffi::Error e = check_cache(k, v, valid); e.failure()) return e;
  const auto dk = k.dimensions(), dqkv = qkv.dimensions(), ds = slot.dimensions(), dout = o->dimensions();
  const int64_t B = dk[0], KV = dk[1], S = dk[2], Dh = dk[3];
  if (dqkv.size() != 2 || dqkv[1] != B || Dh == 0 || KV == 0 || dqkv[0] % (KV * Dh) != 0 ||
      dqkv[0] / (KV * Dh) < 3 || ds.size() != 1 || ds[0] != B)
    return ffi::Error::InvalidArgument(
        "decode attention update: qkv must be ((KV G + 2 KV) Dh, B) and slot (B,) for a (B, KV, S, Dh) cache");
  const int64_t G = dqkv[0] / (KV * Dh) - 2, H = KV * G;
  if (dout.size() != 2 || dout[0] != H * Dh || dout[1] != B)
    return ffi::Error::InvalidArgument("decode attention update: the output must be (KV G Dh, B)");
  const auto same = [&dk](auto d) { return d.size() == dk.size() && std::equal(d.begin(), d.end(), dk.begin()); };
  if (!same(k_out->dimensions()) || !same(v_out->dimensions()))
    return ffi::Error::InvalidArgument("decode attention update: the updated cache must have the cache's shape");
  // The cache outputs alias the inputs (XLA copies where it cannot give them the same buffer); should they not,
  // the output starts as a copy of the input.
  if (k_out->typed_data() != k.typed_data()) std::memcpy(k_out->typed_data(), k.typed_data(), k.size_bytes());
  if (v_out->typed_data() != v.typed_data()) std::memcpy(v_out->typed_data(), v.typed_data(), v.size_bytes());
  const Layout feature_major{1, Dh * B, B};
  const float *x = qkv.typed_data();
  Problem p{x, k_out->typed_data(), v_out->typed_data(), valid.typed_data(), o->typed_data(), B, KV, G, S, Dh,
            scale, feature_major};
  p.k_new = x + H * Dh * B, p.v_new = x + (H + KV) * Dh * B, p.kv_new = feature_major;
  p.slot = slot.typed_data();
  run(pool, p);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(pytest_reward_decode_attention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(pytest_reward_decode_attention_update, DecodeAttentionUpdate,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // qkv
                                  .Arg<ffi::Buffer<ffi::S32>>()   // slot
                                  .Arg<ffi::Buffer<ffi::F32>>()   // k
                                  .Arg<ffi::Buffer<ffi::F32>>()   // v
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // valid
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>()    // o
                                  .Ret<ffi::Buffer<ffi::F32>>()    // k, updated
                                  .Ret<ffi::Buffer<ffi::F32>>());  // v, updated
