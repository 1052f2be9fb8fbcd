// Hot loops of the fused statistics, written with GCC/Clang vector extensions so that they vectorise
// with the portable x86-64 baseline (SSE2) and, on x86-64 Linux, also get an AVX2 clone picked at load
// time (target_clones): no -march flag, the same wheel runs on every x86-64 machine.
//
// Classification uses the integer bits of each value (|x| as bits compared with the bits of eps and
// large), so counts are exact whatever the thread's denormal flags (DAZ/FTZ) are.
#include "stats_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace debugtune {

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define DT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DT_CLONES
#endif

namespace {

typedef float f32x8 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

constexpr int32_t F32_ABS = 0x7fffffff, F32_INF = 0x7f800000;

// Exponent field → raw bin (see stats_kernel.h).
template <int BIAS, int EMASK> struct BinTable {
  uint8_t bin[EMASK + 1];
  BinTable() {
    for (int f = 0; f <= EMASK; ++f) {
      const int e = f - BIAS;
      if (f == 0) bin[f] = 0;
      else if (f == EMASK) bin[f] = NBINS - 1;
      else if (e < HIST_LO) bin[f] = 1;
      else if (e > HIST_HI) bin[f] = NBINS - 2;
      else bin[f] = (uint8_t)(2 + e - HIST_LO);
    }
  }
};
const BinTable<127, 0xff> F32_BINS;
const BinTable<1023, 0x7ff> F64_BINS;

// Per-lane accumulators of the float32 kernel (8 lanes; sums in two 4-lane double vectors each).
struct LanesF32 {
  f64x4 s0, s1, q0, q1;
  f32x8 mn, mx;
  i32x8 cz, ct, cge, cn;  // zeros, tiny, |x| >= large (Inf and NaN included), NaN
};

DT_CLONES void lanes_f32(const float *x, int64_t n8, int32_t eps, int32_t big, LanesF32 &acc) {
  LanesF32 L = acc;
  const f32x8 pinf = f32x8{} + std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n8; i += 8) {
    f32x8 v;
    std::memcpy(&v, x + i, sizeof(v));
    const i32x8 a = (i32x8)v & F32_ABS;
    const i32x8 fin = a < F32_INF;  // -1 where finite
    const f32x8 vf = (f32x8)((i32x8)v & fin);
    f32x4 lo, hi;
    std::memcpy(&lo, &vf, sizeof(lo));
    std::memcpy(&hi, (const char *)&vf + sizeof(lo), sizeof(hi));
    const f64x4 dl = __builtin_convertvector(lo, f64x4), dh = __builtin_convertvector(hi, f64x4);
    L.s0 += dl;
    L.s1 += dh;
    L.q0 += dl * dl;
    L.q1 += dh * dh;
    const f32x8 vlo = fin ? v : pinf, vhi = fin ? v : -pinf;
    L.mn = vlo < L.mn ? vlo : L.mn;
    L.mx = vhi > L.mx ? vhi : L.mx;
    L.cz -= a == 0;
    L.ct -= a < eps;
    L.cge -= a >= big;
    L.cn -= a > F32_INF;
  }
  acc = L;
}

// Counts per exponent field (256 bins, mapped to the output bins once per chunk). Four sub-histograms
// break the store-to-load chain when neighbours fall into the same bin.
DT_CLONES void hist_f32(const float *x, int64_t n, uint32_t (*h)[256]) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) ++h[k][(f32_bits(x[i + k]) << 1) >> 24];
  for (; i < n; ++i) ++h[0][(f32_bits(x[i]) << 1) >> 24];
}

// Scalar accumulation of one value (tails of float blocks, every element of float64 tensors). Like the
// vector lanes it counts |x| >= large over all values; the caller subtracts the non-finite ones.
template <typename F, typename U> struct Scalar {
  double s = 0, q = 0, mn = std::numeric_limits<double>::infinity(), mx = -std::numeric_limits<double>::infinity();
  uint64_t cz = 0, ct = 0, cge = 0, cn = 0;
  void add(F v, U a, U inf, U eps, U big) {  // a = |v| as bits
    cz += a == 0;
    ct += a < eps;
    cge += a >= big;
    cn += a > inf;
    if (a >= inf) return;
    s += (double)v;
    q += (double)v * (double)v;
    mn = std::min(mn, (double)v);
    mx = std::max(mx, (double)v);
  }
};

// Counts into `out`; `nonfinite` (Inf and NaN) are taken off the |x| >= large count. |min| or |max| is
// the abs-max of the finite values (both stay ±Inf sentinels when there are none).
void finish(Partial &out, uint64_t cz, uint64_t ct, uint64_t cge, uint64_t cn, uint64_t nonfinite) {
  out.zeros += cz;
  out.tiny += ct;
  out.large += cge - nonfinite;
  out.nan += cn;
  out.absmax = std::isfinite(out.mn) ? std::max(-out.mn, out.mx) : 0.0;
}

void chunk_f32(const TensorRef &t, int64_t begin, int64_t end, double eps, double large, Partial &out) {
  const int32_t eps_b = (int32_t)f32_bits((float)eps), big_b = (int32_t)f32_bits((float)large);
  const float inf = std::numeric_limits<float>::infinity();
  LanesF32 L{};
  L.mn = f32x8{} + inf;
  L.mx = f32x8{} - inf;
  Scalar<float, uint32_t> tail;
  uint32_t h[4][256];
  std::memset(h, 0, sizeof(h));
  alignas(64) float buf[STATS_BLOCK];
  for (int64_t b = begin; b < end; b += STATS_BLOCK) {
    const int64_t n = std::min(STATS_BLOCK, end - b), n8 = n & ~int64_t(7);
    const float *x = load_block<float>(t, b, n, buf);
    lanes_f32(x, n8, eps_b, big_b, L);
    for (int64_t i = n8; i < n; ++i) tail.add(x[i], f32_bits(x[i]) & F32_ABS, F32_INF, eps_b, big_b);
    hist_f32(x, n, h);
  }
  // Fixed reduction order: lanes 0..7, then the scalar tail.
  for (int j = 0; j < 4; ++j) {
    out.sum += L.s0[j];
    out.sumsq += L.q0[j];
  }
  for (int j = 0; j < 4; ++j) {
    out.sum += L.s1[j];
    out.sumsq += L.q1[j];
  }
  out.sum += tail.s;
  out.sumsq += tail.q;
  out.mn = tail.mn;
  out.mx = tail.mx;
  uint64_t cz = tail.cz, ct = tail.ct, cge = tail.cge, cn = tail.cn;
  for (int j = 0; j < 8; ++j) {
    out.mn = std::min(out.mn, (double)L.mn[j]);
    out.mx = std::max(out.mx, (double)L.mx[j]);
    cz += (uint32_t)L.cz[j];
    ct += (uint32_t)L.ct[j];
    cge += (uint32_t)L.cge[j];
    cn += (uint32_t)L.cn[j];
  }
  uint64_t raw[256];
  for (int k = 0; k < 256; ++k) raw[k] = (uint64_t)h[0][k] + h[1][k] + h[2][k] + h[3][k];
  for (int k = 0; k < 256; ++k) out.hist[F32_BINS.bin[k]] += raw[k];
  finish(out, cz, ct, cge, cn, raw[255]);
}

void chunk_f64(const TensorRef &t, int64_t begin, int64_t end, double eps, double large, Partial &out) {
  const uint64_t abs_mask = 0x7fffffffffffffffull, inf = 0x7ff0000000000000ull;
  const uint64_t eps_b = f64_bits(eps), big_b = f64_bits(large);
  Scalar<double, uint64_t> acc;
  uint64_t nonfinite = 0;
  alignas(64) double buf[STATS_BLOCK];
  for (int64_t b = begin; b < end; b += STATS_BLOCK) {
    const int64_t n = std::min(STATS_BLOCK, end - b);
    const double *x = load_block<double>(t, b, n, buf);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t a = f64_bits(x[i]) & abs_mask;
      acc.add(x[i], a, inf, eps_b, big_b);
      nonfinite += a >= inf;
      ++out.hist[F64_BINS.bin[a >> 52]];
    }
  }
  out.sum = acc.s;
  out.sumsq = acc.q;
  out.mn = acc.mn;
  out.mx = acc.mx;
  finish(out, acc.cz, acc.ct, acc.cge, acc.cn, nonfinite);
}

DT_CLONES void update_f32(const float *x, const float *y, int64_t n8, f64x4 *d2, f64x4 *w2) {
  f64x4 d0 = d2[0], d1 = d2[1], w0 = w2[0], w1 = w2[1];
  for (int64_t i = 0; i < n8; i += 8) {
    f32x4 xl, xh, yl, yh;
    std::memcpy(&xl, x + i, 16);
    std::memcpy(&xh, x + i + 4, 16);
    std::memcpy(&yl, y + i, 16);
    std::memcpy(&yh, y + i + 4, 16);
    const f64x4 al = __builtin_convertvector(xl, f64x4), ah = __builtin_convertvector(xh, f64x4);
    const f64x4 el = al - __builtin_convertvector(yl, f64x4), eh = ah - __builtin_convertvector(yh, f64x4);
    d0 += el * el;
    d1 += eh * eh;
    w0 += al * al;
    w1 += ah * ah;
  }
  d2[0] = d0;
  d2[1] = d1;
  w2[0] = w0;
  w2[1] = w1;
}

}  // namespace

void chunk_stats(const TensorRef &t, int64_t begin, int64_t end, double eps, double large, Partial &out) {
  if (t.kind == Kind::F64) chunk_f64(t, begin, end, eps, large, out);
  else chunk_f32(t, begin, end, eps, large, out);
}

void chunk_update(const TensorRef &a, const TensorRef &b, int64_t begin, int64_t end, double *out) {
  f64x4 d2[2] = {}, w2[2] = {};
  double dt = 0, wt = 0;
  if (a.kind == Kind::F64) {
    alignas(64) double ba[STATS_BLOCK], bb[STATS_BLOCK];
    for (int64_t s = begin; s < end; s += STATS_BLOCK) {
      const int64_t n = std::min(STATS_BLOCK, end - s);
      const double *x = load_block<double>(a, s, n, ba), *y = load_block<double>(b, s, n, bb);
      for (int64_t i = 0; i < n; ++i) {
        dt += (x[i] - y[i]) * (x[i] - y[i]);
        wt += x[i] * x[i];
      }
    }
  } else {
    alignas(64) float ba[STATS_BLOCK], bb[STATS_BLOCK];
    for (int64_t s = begin; s < end; s += STATS_BLOCK) {
      const int64_t n = std::min(STATS_BLOCK, end - s), n8 = n & ~int64_t(7);
      const float *x = load_block<float>(a, s, n, ba), *y = load_block<float>(b, s, n, bb);
      update_f32(x, y, n8, d2, w2);
      for (int64_t i = n8; i < n; ++i) {
        const double d = (double)x[i] - (double)y[i];
        dt += d * d;
        wt += (double)x[i] * (double)x[i];
      }
    }
  }
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 4; ++j) {
      out[0] += d2[k][j];
      out[1] += w2[k][j];
    }
  out[0] += dt;
  out[1] += wt;
}

}  // namespace debugtune
