// Greedy token choice on the CPU, as an XLA FFI handler (see kernels/__init__.py, which builds and registers it).
//
//   x (V, B) f32 -> (B,) s32: per column b, the first v at which x[v, b] is largest, a NaN counting as larger
//   than any number (jnp.argmax over axis 0, and generate.argmax_first).
//
// Why: the decode step's logits are (V, B), vocabulary-major, and XLA's CPU backend takes the first index of the
// maximum in three passes over them (a max, then a select and a min over an iota: ~1 ms per token for GPT-2's
// 50257 ids at batch 32). This reads them once, the columns of a row side by side in vector registers. The rows
// are cut into at most one contiguous range per thread of XLA's intra-op pool; the ranges are merged in order,
// a later range winning only with a strictly larger value, so the result is the first index whatever the split.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vmath.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using pytest_reward::i16;
using pytest_reward::load16;
using pytest_reward::v16;

// The best value and its first index, per column of rows [begin, end).
struct Range {
  std::vector<float> best;
  std::vector<int32_t> index;
};

// Whether y displaces best: larger, or the first NaN.
inline bool beats(float y, float best) { return y > best || (std::isnan(y) && !std::isnan(best)); }

void scan(const float *__restrict x, int64_t B, int64_t begin, int64_t end, Range &r) {
  r.best.assign(B, 0.0f);
  r.index.assign(B, static_cast<int32_t>(begin));
  if (begin >= end) return;
  int64_t c = 0;
  for (; c + 16 <= B; c += 16) {  // sixteen columns at a time
    v16 best = load16(x + begin * B + c);
    i16 index = static_cast<int32_t>(begin) + i16{};
    for (int64_t v = begin + 1; v < end; ++v) {
      const v16 y = load16(x + v * B + c);
      const i16 more = (y > best) | ((y != y) & (best == best));
      best = more ? y : best;
      index = more ? static_cast<int32_t>(v) + i16{} : index;
    }
    for (int j = 0; j < 16; ++j) r.best[c + j] = best[j], r.index[c + j] = index[j];
  }
  for (; c < B; ++c) {  // the last columns one by one
    float best = x[begin * B + c];
    int32_t index = static_cast<int32_t>(begin);
    for (int64_t v = begin + 1; v < end; ++v) {
      const float y = x[v * B + c];
      if (beats(y, best)) best = y, index = static_cast<int32_t>(v);
    }
    r.best[c] = best, r.index[c] = index;
  }
}

ffi::Error ArgmaxColumns(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::S32> out) {
  const auto dx = x.dimensions();
  if (dx.size() != 2) return ffi::Error::InvalidArgument("argmax over columns: x must be rank 2 (V, B)");
  const int64_t V = dx[0], B = dx[1];
  if (V == 0) return ffi::Error::InvalidArgument("argmax over columns: no rows (V = 0)");
  if (V > INT32_MAX) return ffi::Error::InvalidArgument("argmax over columns: more rows than int32 indexes");
  if (out->dimensions().size() != 1 || out->dimensions()[0] != B)
    return ffi::Error::InvalidArgument("argmax over columns: the result must be (B,)");
  // A range per thread, each at least 64K values: below that a helper costs more than it saves.
  const int64_t parts = std::min(V, std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), V * B / 65536)));
  std::vector<Range> ranges(parts);
  const float *data = x.typed_data();
  pytest_reward::parallel_for(pool, parts, parts, [&] {
    return [&](int64_t i) { scan(data, B, V * i / parts, V * (i + 1) / parts, ranges[i]); };
  });
  int32_t *o = out->typed_data();
  for (int64_t b = 0; b < B; ++b) {
    float best = ranges[0].best[b];
    int32_t index = ranges[0].index[b];
    for (int64_t i = 1; i < parts; ++i) {  // in order: a tie keeps the earlier range's index
      if (beats(ranges[i].best[b], best)) best = ranges[i].best[b], index = ranges[i].index[b];
    }
    o[b] = index;
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(pytest_reward_argmax_columns, ArgmaxColumns,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());
