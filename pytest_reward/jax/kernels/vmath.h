// Vector arithmetic shared by the kernels of this directory: sixteen floats in one AVX-512 register (or two
// AVX2 ones; GCC and Clang lower the vector extension to what -march=native has).
#pragma once

#include <cstdint>

namespace pytest_reward {

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t i16 __attribute__((vector_size(64), aligned(4)));

inline v16 load16(const float *p) {
  v16 r;
  __builtin_memcpy(&r, p, sizeof r);
  return r;
}

inline void store16(float *p, v16 x) { __builtin_memcpy(p, &x, sizeof x); }

// x in every lane (v16{} + x would add: 0 + -0 is +0, so the compiler may not drop the add).
inline v16 splat(float x) { return v16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

// A tree sum kept in registers (a scalar loop over the lanes is a chain of 16 dependent adds).
inline float hsum(v16 x) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef float v4 __attribute__((vector_size(16)));
  v8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 c = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (c[0] + c[2]) + (c[1] + c[3]);
}

inline float hmax(v16 x) {
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// exp of sixteen floats, within one ulp (relative error below 8.5e-8 over [-87.3, 0.5] against the float64
// exp): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes' degree-6 polynomial, times 2^n built in the exponent
// bits. Where exp(x) is below the smallest normal float (x < -87.34) the result is 0, and -inf gives 0; x is
// clamped at 88.37 (a softmax exponentiates scores minus their maximum, never above 0).
inline v16 exp16(v16 x) {
  const v16 hi = splat(88.3762626647949f), lo = splat(-87.3365478515625f);
  const i16 under = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  const v16 shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  v16 n = x * 1.44269504088896341f + shifter;
  n -= shifter;
  v16 r = x - n * 0.693359375f;  // ln 2 in two parts: the first exact in float, so r loses no bits
  r = r + n * 2.12194440e-4f;
  v16 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const v16 y = p * r * r + r + 1.0f;
  const i16 bits = (__builtin_convertvector(n, i16) + 127) << 23;
  v16 two_n;
  __builtin_memcpy(&two_n, &bits, sizeof two_n);
  return under ? v16{} : y * two_n;
}

}  // namespace pytest_reward
