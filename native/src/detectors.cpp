// Streaming anomaly detectors keyed by series, usable live (an alarm fires at the step of the point):
//   - EWMA mean/variance z-score (O(1) per point),
//   - robust z-score against the median and MAD of the previous `window` points: a sorted copy of the
//     window is kept (binary-search insert/erase, i.e. O(log w) comparisons plus an O(w) memmove of at
//     most w doubles) and the MAD is the k-th smallest of two sorted deviation runs (O(log w)),
//   - two-sided CUSUM on the EWMA z-score with reference k and decision interval h (reset on alarm),
//   - spike flags |z| > threshold.
// Every number that decides an alarm is a parameter from the caller (the knowledge base).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace debugtune {

namespace nb = nanobind;

namespace {

enum Flag : int32_t { SPIKE = 1, ROBUST_SPIKE = 2, DRIFT_UP = 4, DRIFT_DOWN = 8, NONFINITE = 16 };
constexpr double MAD_TO_SIGMA = 1.4826;  // consistency constant of the MAD for normal data

struct Params {
  double alpha, z_threshold, robust_threshold;
  int64_t window;
  double cusum_k, cusum_h;
  int64_t warmup;
};

struct Series {
  int64_t n = 0;  // finite points seen
  double mean = 0, var = 0;
  std::vector<double> ring, sorted;  // last `window` points in arrival order and sorted
  size_t head = 0;
  double cpos = 0, cneg = 0;
};

// Median of a sorted run.
double median_of(const std::vector<double> &a) {
  const size_t n = a.size();
  return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
}

// k-th smallest (0-based) of |a_i - m| over a sorted `a` with median m, without materialising the
// deviations: left of the split they grow leftwards (m - a[p-1-j]), right of it rightwards (a[p+j] - m).
double kth_deviation(const std::vector<double> &a, double m, int64_t k) {
  const int64_t n = (int64_t)a.size();
  const int64_t p = std::lower_bound(a.begin(), a.end(), m) - a.begin();
  const int64_t nl = p, nr = n - p;
  auto L = [&](int64_t j) { return m - a[p - 1 - j]; };
  auto R = [&](int64_t j) { return a[p + j] - m; };
  int64_t lo = std::max<int64_t>(0, k + 1 - nr), hi = std::min<int64_t>(k + 1, nl);
  while (lo < hi) {  // smallest i (taken from L) such that L(i) >= R(k - i), i.e. no more L is needed
    const int64_t i = (lo + hi) / 2;
    if (L(i) < R(k - i)) lo = i + 1;
    else hi = i;
  }
  const int64_t i = lo, r = k + 1 - i;
  double v = -std::numeric_limits<double>::infinity();
  if (i > 0) v = std::max(v, L(i - 1));
  if (r > 0) v = std::max(v, R(r - 1));
  return v;
}

double mad_of(const std::vector<double> &a, double m) {
  const int64_t n = (int64_t)a.size();
  return n % 2 ? kth_deviation(a, m, n / 2) : (kth_deviation(a, m, n / 2 - 1) + kth_deviation(a, m, n / 2)) / 2;
}

double zscore(double x, double center, double scale) {
  if (scale > 0) return (x - center) / scale;
  return x == center ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), x - center);
}

class StreamDetectors {
 public:
  explicit StreamDetectors(Params p) : p_(p) {
    auto bad = [](const char *what) { throw nb::value_error(what); };
    if (!(p.alpha > 0 && p.alpha <= 1)) bad("alpha must be in (0, 1]");
    if (p.window < 1) bad("window must be >= 1");
    if (!(p.z_threshold > 0) || !(p.robust_threshold > 0)) bad("z thresholds must be > 0");
    if (!(p.cusum_k >= 0) || !(p.cusum_h > 0)) bad("cusum_k must be >= 0 and cusum_h > 0");
    if (p.warmup < 0) bad("warmup must be >= 0");
  }

  int64_t id(const std::string &name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int64_t k = (int64_t)series_.size();
    ids_.emplace(name, k);
    names_.push_back(name);
    series_.emplace_back();
    return k;
  }

  // One point of series `k`; writes ewma z, robust z, cusum+, cusum-, flags.
  void update(int64_t k, double x, double *ez, double *rz, double *cp, double *cn, int32_t *flags) {
    Series &s = series_.at((size_t)k);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    *ez = *rz = nan;
    *flags = 0;
    if (!std::isfinite(x)) {
      *cp = s.cpos;
      *cn = s.cneg;
      *flags = NONFINITE;
      return;
    }
    if (s.n >= std::max<int64_t>(1, p_.warmup)) {
      *ez = zscore(x, s.mean, std::sqrt(s.var));
      const double med = median_of(s.sorted);
      *rz = zscore(x, med, MAD_TO_SIGMA * mad_of(s.sorted, med));
      if (std::fabs(*ez) > p_.z_threshold) *flags |= SPIKE;
      if (std::fabs(*rz) > p_.robust_threshold) *flags |= ROBUST_SPIKE;
      s.cpos = std::max(0.0, s.cpos + *ez - p_.cusum_k);
      s.cneg = std::max(0.0, s.cneg - *ez - p_.cusum_k);
      if (s.cpos > p_.cusum_h) *flags |= DRIFT_UP;
      if (s.cneg > p_.cusum_h) *flags |= DRIFT_DOWN;
    }
    *cp = s.cpos;
    *cn = s.cneg;
    if (*flags & DRIFT_UP) s.cpos = 0;
    if (*flags & DRIFT_DOWN) s.cneg = 0;
    // EWMA (West's incremental form), then the window.
    if (s.n == 0) {
      s.mean = x;
      s.var = 0;
    } else {
      const double diff = x - s.mean, incr = p_.alpha * diff;
      s.mean += incr;
      s.var = (1 - p_.alpha) * (s.var + diff * incr);
    }
    ++s.n;
    if ((int64_t)s.ring.size() < p_.window) {
      s.ring.push_back(x);
    } else {
      const double old = s.ring[s.head];
      s.sorted.erase(std::lower_bound(s.sorted.begin(), s.sorted.end(), old));
      s.ring[s.head] = x;
      s.head = (s.head + 1) % (size_t)p_.window;
    }
    s.sorted.insert(std::upper_bound(s.sorted.begin(), s.sorted.end(), x), x);
  }

  nb::tuple update_many(nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> ids,
                        nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> values) {
    const size_t n = ids.shape(0);
    if (values.shape(0) != n) throw nb::value_error("ids and values differ in length");
    for (size_t i = 0; i < n; ++i)
      if (ids(i) < 0 || ids(i) >= (int64_t)series_.size())
        throw nb::index_error(("unknown series id " + std::to_string(ids(i))).c_str());
    double *out = new double[4 * n];
    int32_t *flags = new int32_t[n];
    // The GIL stays held: updates are cheap, and it serialises callers on one detector set.
    for (size_t i = 0; i < n; ++i)
      update(ids(i), values(i), out + i, out + n + i, out + 2 * n + i, out + 3 * n + i, flags + i);
    nb::capsule own_out(out, [](void *p) noexcept { delete[] (double *)p; });
    nb::capsule own_flags(flags, [](void *p) noexcept { delete[] (int32_t *)p; });
    using Col = nb::ndarray<nb::numpy, double, nb::ndim<1>>;
    return nb::make_tuple(Col(out, {n}, own_out), Col(out + n, {n}, own_out), Col(out + 2 * n, {n}, own_out),
                          Col(out + 3 * n, {n}, own_out),
                          nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(flags, {n}, own_flags));
  }

  nb::dict state(int64_t k) const {
    const Series &s = series_.at((size_t)k);
    nb::dict d;
    d["name"] = names_[(size_t)k];
    d["n"] = s.n;
    d["mean"] = s.mean;
    d["var"] = s.var;
    d["cusum_pos"] = s.cpos;
    d["cusum_neg"] = s.cneg;
    d["window"] = s.sorted;
    return d;
  }

  const std::vector<std::string> &names() const { return names_; }

 private:
  Params p_;
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<std::string> names_;
  std::vector<Series> series_;
};

}  // namespace

void register_detectors(nb::module_ &m) {
  m.attr("FLAG_SPIKE") = (int)SPIKE;
  m.attr("FLAG_ROBUST_SPIKE") = (int)ROBUST_SPIKE;
  m.attr("FLAG_DRIFT_UP") = (int)DRIFT_UP;
  m.attr("FLAG_DRIFT_DOWN") = (int)DRIFT_DOWN;
  m.attr("FLAG_NONFINITE") = (int)NONFINITE;
  m.attr("MAD_TO_SIGMA") = MAD_TO_SIGMA;
  nb::class_<StreamDetectors>(m, "StreamDetectors")
      .def(
          "__init__",
          [](StreamDetectors *self, double alpha, double z_threshold, double robust_threshold, int64_t window,
             double cusum_k, double cusum_h, int64_t warmup) {
            new (self) StreamDetectors(Params{alpha, z_threshold, robust_threshold, window, cusum_k, cusum_h, warmup});
          },
          nb::arg("alpha"), nb::arg("z_threshold"), nb::arg("robust_threshold"), nb::arg("window"),
          nb::arg("cusum_k"), nb::arg("cusum_h"), nb::arg("warmup"))
      .def("id", &StreamDetectors::id, nb::arg("name"), "Series id of a name (created on first use).")
      .def("update_many", &StreamDetectors::update_many, nb::arg("ids"), nb::arg("values"),
           "Points in order; returns (ewma_z, robust_z, cusum_pos, cusum_neg, flags).")
      .def("state", &StreamDetectors::state, nb::arg("id"))
      .def_prop_ro("names", &StreamDetectors::names);
}

}  // namespace debugtune
