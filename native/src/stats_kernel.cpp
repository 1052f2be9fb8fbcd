// Hot loops of the fused statistics, written with GCC/Clang vector extensions so that they vectorise
// with the portable x86-64 baseline (SSE2) and, on x86-64 Linux, also get an AVX2 clone picked at load
// time (target_clones): no -march flag, the same wheel runs on every x86-64 machine.
//
// Classification uses the integer bits of each value (|x| as bits compared with the bits of eps and
// large), so counts are exact whatever the thread's denormal flags (DAZ/FTZ) are.
//
// float32 blocks take a fast path first: sums, sums of squares, min and max of the raw values plus the
// bit-based counts, with no per-element finiteness test. A NaN or ±Inf anywhere in the block makes the
// float64 sum of squares non-finite (finite float32 values cannot overflow it), so the block is then
// replayed from the lane state saved before it with the exact masked kernel, which also counts NaN and
// Inf. Finite values go through the same lane operations in the same order on both paths, so the result
// is bit-for-bit what the masked kernel alone would give, at the cost of the fast path.
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
typedef double f64x4 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

constexpr int32_t F32_ABS = 0x7fffffff, F32_INF = 0x7f800000;
// Software prefetch distance in floats (4 KiB ahead, into the next block of a contiguous tensor): the
// hardware prefetcher alone leaves a streaming pass at about half of what memory delivers on the
// machines measured (docs/native.md). A prefetch never faults, so reading past the end is harmless.
constexpr int64_t PREFETCH = 1024;

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

// Per-lane sums of the float32 kernel (8 lanes; sums in two 4-lane double vectors each): the state a
// block with non-finite values is replayed from.
struct Sums {
  f64x4 s0, s1, q0, q1;
  f32x8 mn, mx;
};

// Per-lane counts from the bits: zeros, tiny, |x| >= large (Inf and NaN included), NaN, NaN or Inf.
struct Counts {
  i32x8 cz, ct, cge, cn, cnf;
};

// Four floats widened to doubles. Written as a lane loop on purpose: GCC 12 lowers
// __builtin_convertvector(f32x4 → f64x4) to 128-bit halves plus inserts even in the AVX2 clone, while this
// loop becomes one vcvtps2pd ymm per call (the fused pass ran ~30% faster, docs/native.md).
inline f64x4 widen(const float *x) {
  f64x4 d;
  for (int j = 0; j < 4; ++j) d[j] = (double)x[j];
  return d;
}

inline void add_sums(Sums &S, const float *x) {
  const f64x4 dl = widen(x), dh = widen(x + 4);
  S.s0 += dl;
  S.s1 += dh;
  S.q0 += dl * dl;
  S.q1 += dh * dh;
}

// Fast path over n8 (a multiple of 8) values: raw sums and min/max (a NaN compares false and leaves
// min/max as they were; ±Inf and NaN spoil the sums, which the caller detects) and bit counts.
DT_CLONES void fast_f32(const float *x, int64_t n8, int32_t eps, int32_t big, bool large, Sums &acc, Counts &cnt) {
  Sums S = acc;
  i32x8 cz = cnt.cz, ct = cnt.ct, cge = cnt.cge;
  const i32x8 abs_mask = i32x8{} + F32_ABS, eps_v = i32x8{} + eps, big_v = i32x8{} + big;
  for (int64_t i = 0; i < n8; i += 8) {
    if ((i & 15) == 0) __builtin_prefetch(x + i + PREFETCH);  // one 64-byte line per two iterations
    f32x8 v;
    std::memcpy(&v, x + i, sizeof(v));
    add_sums(S, x + i);
    S.mn = v < S.mn ? v : S.mn;
    S.mx = v > S.mx ? v : S.mx;
    const i32x8 a = (i32x8)v & abs_mask;
    cz -= a == 0;
    ct -= a < eps_v;
    if (large) cge -= a >= big_v;  // loop-invariant: unswitched by the compiler
  }
  acc = S;
  cnt.cz = cz;
  cnt.ct = ct;
  cnt.cge = cge;
}

// Exact path for blocks holding NaN or ±Inf: sums and min/max over the finite values only (the same
// lane operations as fast_f32 for them), NaN and non-finite counts.
void masked_f32(const float *x, int64_t n8, Sums &S, Counts &cnt) {
  const float inf = std::numeric_limits<float>::infinity();
  const f32x8 pinf = f32x8{} + inf;
  for (int64_t i = 0; i < n8; i += 8) {
    f32x8 v;
    std::memcpy(&v, x + i, sizeof(v));
    const i32x8 a = (i32x8)v & F32_ABS;
    const i32x8 fin = a < F32_INF;  // -1 where finite
    const f32x8 vf = (f32x8)((i32x8)v & fin);
    alignas(32) float tmp[8];
    std::memcpy(tmp, &vf, sizeof(tmp));
    add_sums(S, tmp);
    const f32x8 vlo = fin ? v : pinf, vhi = fin ? v : -pinf;
    S.mn = vlo < S.mn ? vlo : S.mn;
    S.mx = vhi > S.mx ? vhi : S.mx;
    cnt.cn -= a > F32_INF;
    cnt.cnf -= ~fin;
  }
}

inline bool all_finite(f64x4 v) {
  return std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]) && std::isfinite(v[3]);
}

// Counts per exponent field (256 bins, mapped to the output bins once per chunk). Eight sub-histograms
// break the store-to-load chain when neighbours fall into the same bin.
DT_CLONES void hist_f32(const float *x, int64_t n, uint32_t (*h)[256]) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) ++h[k][(f32_bits(x[i + k]) >> 23) & 0xff];
  for (; i < n; ++i) ++h[0][(f32_bits(x[i]) >> 23) & 0xff];
}

// Scalar accumulation of one value (tails of float blocks, every element of float64 tensors). Like the
// vector lanes it counts |x| >= large over all values; the caller subtracts the non-finite ones.
template <typename F, typename U> struct Scalar {
  double s = 0, q = 0, mn = std::numeric_limits<double>::infinity(), mx = -std::numeric_limits<double>::infinity();
  uint64_t cz = 0, ct = 0, cge = 0, cn = 0, cnf = 0;
  void add(F v, U a, U inf, U eps, U big, bool large) {  // a = |v| as bits
    cz += a == 0;
    ct += a < eps;
    cge += large && a >= big;
    cn += a > inf;
    if (a >= inf) {
      ++cnf;
      return;
    }
    s += (double)v;
    q += (double)v * (double)v;
    mn = std::min(mn, (double)v);
    mx = std::max(mx, (double)v);
  }
};

// Counts into `out`; with `large` counted, the non-finite values are taken off it. |min| or |max| is the
// abs-max of the finite values (both stay ±Inf sentinels when there are none).
void finish(Partial &out, uint64_t cz, uint64_t ct, uint64_t cge, uint64_t cn, uint64_t cnf, bool large) {
  out.zeros += cz;
  out.tiny += ct;
  out.large += large ? cge - cnf : 0;
  out.nan += cn;
  out.nonfinite += cnf;
  out.absmax = std::isfinite(out.mn) ? std::max(-out.mn, out.mx) : 0.0;
}

template <typename T> uint64_t lane_total(T v) {
  uint64_t s = 0;
  for (int j = 0; j < 8; ++j) s += (uint32_t)v[j];
  return s;
}

void chunk_f32(const TensorRef &t, int64_t begin, int64_t end, const StatsOptions &opt, Partial &out) {
  const int32_t eps_b = (int32_t)f32_bits((float)opt.eps), big_b = (int32_t)f32_bits((float)opt.large);
  const bool large = big_b < F32_INF;
  const float inf = std::numeric_limits<float>::infinity();
  Sums S{};
  S.mn = f32x8{} + inf;
  S.mx = f32x8{} - inf;
  Counts C{};
  Scalar<float, uint32_t> tail;
  uint32_t h[8][256];
  if (opt.hist) std::memset(h, 0, sizeof(h));
  alignas(64) float buf[STATS_BLOCK];
  for (int64_t b = begin; b < end; b += STATS_BLOCK) {
    const int64_t n = std::min(STATS_BLOCK, end - b), n8 = n & ~int64_t(7);
    const float *x = load_block<float>(t, b, n, buf);
    const Sums before = S;
    fast_f32(x, n8, eps_b, big_b, large, S, C);
    if (!all_finite(S.q0) || !all_finite(S.q1)) {
      S = before;
      masked_f32(x, n8, S, C);
    }
    for (int64_t i = n8; i < n; ++i)
      tail.add(x[i], f32_bits(x[i]) & F32_ABS, F32_INF, eps_b, big_b, large);
    if (opt.hist) hist_f32(x, n, h);
  }
  // Fixed reduction order: lanes 0..7, then the scalar tail.
  for (int j = 0; j < 4; ++j) {
    out.sum += S.s0[j];
    out.sumsq += S.q0[j];
  }
  for (int j = 0; j < 4; ++j) {
    out.sum += S.s1[j];
    out.sumsq += S.q1[j];
  }
  out.sum += tail.s;
  out.sumsq += tail.q;
  out.mn = tail.mn;
  out.mx = tail.mx;
  for (int j = 0; j < 8; ++j) {
    out.mn = std::min(out.mn, (double)S.mn[j]);
    out.mx = std::max(out.mx, (double)S.mx[j]);
  }
  if (opt.hist) {
    uint64_t raw[256] = {};
    for (int s = 0; s < 8; ++s)
      for (int k = 0; k < 256; ++k) raw[k] += h[s][k];
    for (int k = 0; k < 256; ++k) out.hist[F32_BINS.bin[k]] += raw[k];
  }
  finish(out, tail.cz + lane_total(C.cz), tail.ct + lane_total(C.ct), tail.cge + lane_total(C.cge),
         tail.cn + lane_total(C.cn), tail.cnf + lane_total(C.cnf), large);
}

void chunk_f64(const TensorRef &t, int64_t begin, int64_t end, const StatsOptions &opt, Partial &out) {
  const uint64_t abs_mask = 0x7fffffffffffffffull, inf = 0x7ff0000000000000ull;
  const uint64_t eps_b = f64_bits(opt.eps), big_b = f64_bits(opt.large);
  const bool large = big_b < inf;
  Scalar<double, uint64_t> acc;
  alignas(64) double buf[STATS_BLOCK];
  for (int64_t b = begin; b < end; b += STATS_BLOCK) {
    const int64_t n = std::min(STATS_BLOCK, end - b);
    const double *x = load_block<double>(t, b, n, buf);
    for (int64_t i = 0; i < n; ++i) acc.add(x[i], f64_bits(x[i]) & abs_mask, inf, eps_b, big_b, large);
    if (opt.hist)
      for (int64_t i = 0; i < n; ++i) ++out.hist[F64_BINS.bin[(f64_bits(x[i]) & abs_mask) >> 52]];
  }
  out.sum = acc.s;
  out.sumsq = acc.q;
  out.mn = acc.mn;
  out.mx = acc.mx;
  finish(out, acc.cz, acc.ct, acc.cge, acc.cn, acc.cnf, large);
}

DT_CLONES void update_f32(const float *x, const float *y, int64_t n8, f64x4 *d2, f64x4 *w2) {
  f64x4 d0 = d2[0], d1 = d2[1], w0 = w2[0], w1 = w2[1];
  for (int64_t i = 0; i < n8; i += 8) {
    if ((i & 15) == 0) {
      __builtin_prefetch(x + i + PREFETCH);
      __builtin_prefetch(y + i + PREFETCH);
    }
    const f64x4 al = widen(x + i), ah = widen(x + i + 4);
    const f64x4 el = al - widen(y + i), eh = ah - widen(y + i + 4);
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

void chunk_stats(const TensorRef &t, int64_t begin, int64_t end, const StatsOptions &opt, Partial &out) {
  if (t.kind == Kind::F64) chunk_f64(t, begin, end, opt, out);
  else chunk_f32(t, begin, end, opt, out);
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
