// The inner kernels of the fused statistics: one chunk of one tensor → a Partial.
#pragma once
#include <cstdint>
#include <limits>

#include "tensor_ref.h"

namespace debugtune {

constexpr int64_t STATS_BLOCK = 2048;  // elements per L1-resident block
constexpr int HIST_LO = -40, HIST_HI = 40;  // exponent bins 2^e <= |x| < 2^(e+1), e in [LO, HI]
constexpr int NBINS = (HIST_HI - HIST_LO + 1) + 4;
// Output bins: 0 zero, 1 under (0 < |x| < 2^LO, subnormals included), 2.. exponents LO..HI,
// NBINS-2 over (finite |x| >= 2^(HI+1)), NBINS-1 ±Inf. NaN is counted apart, never binned.
// Raw bins inside the kernel: 0 holds every exponent-field-0 value (zeros and subnormals) and
// NBINS-1 every exponent-field-all-ones value (Inf and NaN); they are split when a tensor is done.

struct Partial {
  double sum = 0, sumsq = 0;
  double mn = std::numeric_limits<double>::infinity(), mx = -std::numeric_limits<double>::infinity();
  double absmax = 0;
  uint64_t zeros = 0, tiny = 0, large = 0, nan = 0, nonfinite = 0;  // nonfinite: NaN and ±Inf
  uint64_t hist[NBINS] = {};
};

// What one pass computes besides the always-on fields (sums, min/max/absmax, zeros, tiny, NaN, Inf).
struct StatsOptions {
  double eps = 0;       // |x| < eps counts as tiny (>= 0)
  double large = 0;     // |x| >= large counts as large (>= 0; +Inf: nothing is large, and the count is skipped)
  bool hist = true;     // the log2 magnitude histogram
};

// Statistics of elements [begin, end) of t; eps and large are compared in the tensor's float type
// (float32 for f32/f16/bf16, float64 for f64).
void chunk_stats(const TensorRef &t, int64_t begin, int64_t end, const StatsOptions &opt, Partial &out);

// Adds sum((a - b)^2) to out[0] and sum(a^2) to out[1] over elements [begin, end).
void chunk_update(const TensorRef &a, const TensorRef &b, int64_t begin, int64_t end, double *out);

}  // namespace debugtune
