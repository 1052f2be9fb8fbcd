// Fused tensor statistics over many tensors in one call: work split, threads, merge and the Python
// binding (the per-chunk kernels are in stats_kernel.cpp). One read of every element gives numel, sum,
// sum of squares, abs-max, min, max, zeros, tiny (|x| < eps), large (|x| >= large), NaN and Inf counts
// and a log2 magnitude histogram; plus the fused update/weight norms of an optimizer step.
//
// Determinism: a tensor is cut into fixed chunks of CHUNK elements whatever the thread count; each
// chunk is reduced in a fixed lane order and the chunks are merged in index order, so the result is
// bit-for-bit the same with 1 or N threads.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <thread>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "parallel.h"
#include "stats_kernel.h"
#include "tensor_ref.h"

namespace debugtune {

namespace {

constexpr int64_t CHUNK = int64_t(1) << 16;       // elements per work item (the determinism unit)
constexpr int64_t PER_THREAD = int64_t(1) << 21;  // elements a thread must have before another is started

enum Field { NUMEL, SUM, SUMSQ, NORM, ABSMAX, MIN, MAX, ZEROS, TINY, LARGE, NAN_, INF_, NFIELDS };
const char *FIELD_NAMES[NFIELDS] = {"numel", "sum", "sumsq", "norm", "absmax", "min",
                                    "max",   "zeros", "tiny", "large", "nan", "inf"};

struct WorkItem {
  int64_t tensor, begin, end;
};

std::vector<WorkItem> cut(const std::vector<TensorRef> &refs) {
  std::vector<WorkItem> items;
  for (size_t k = 0; k < refs.size(); ++k)
    for (int64_t b = 0; b < refs[k].numel; b += CHUNK)
      items.push_back({(int64_t)k, b, std::min(refs[k].numel, b + CHUNK)});
  return items;
}

int64_t total_numel(const std::vector<TensorRef> &refs) {
  int64_t n = 0;
  for (auto &r : refs) n += r.numel;
  return n;
}

template <typename T> nb::ndarray<nb::numpy, T, nb::ndim<2>> owned_array(T *data, size_t rows, size_t cols) {
  nb::capsule owner(data, [](void *p) noexcept { delete[] (T *)p; });
  return nb::ndarray<nb::numpy, T, nb::ndim<2>>(data, {rows, cols}, owner);
}

std::vector<TensorRef> refs_of(const std::vector<AnyArray> &arrays, int reinterpret, const char *what) {
  std::vector<TensorRef> refs;
  refs.reserve(arrays.size());
  for (size_t k = 0; k < arrays.size(); ++k)
    refs.push_back(make_ref(arrays[k], (Reinterpret)reinterpret, std::string(what) + "[" + std::to_string(k) + "]"));
  return refs;
}

void check_threshold(double v, const char *name) {
  if (!(v >= 0)) throw nb::value_error((std::string(name) + " must be >= 0 (got " + std::to_string(v) + ")").c_str());
}

// Statistics of refs into stats[n, NFIELDS] and hist[n, NBINS]; touches no Python object.
void compute_stats(const std::vector<TensorRef> &refs, double eps, double large, int threads, double *stats,
                   int64_t *hist) {
  const size_t n = refs.size();
  const std::vector<WorkItem> items = cut(refs);
  std::vector<Partial> parts(items.size());
  parallel_items((int64_t)items.size(), pick_threads(threads, total_numel(refs), PER_THREAD), [&](int64_t i) {
    const WorkItem &w = items[i];
    chunk_stats(refs[w.tensor], w.begin, w.end, eps, large, parts[i]);
  });
  std::vector<Partial> merged(n);
  for (size_t i = 0; i < items.size(); ++i) {  // in item order: deterministic
    Partial &m = merged[items[i].tensor];
    const Partial &p = parts[i];
    m.sum += p.sum;
    m.sumsq += p.sumsq;
    m.mn = std::min(m.mn, p.mn);
    m.mx = std::max(m.mx, p.mx);
    m.absmax = std::max(m.absmax, p.absmax);
    m.zeros += p.zeros;
    m.tiny += p.tiny;
    m.large += p.large;
    m.nan += p.nan;
    for (int k = 0; k < NBINS; ++k) m.hist[k] += p.hist[k];
  }
  for (size_t k = 0; k < n; ++k) {
    const Partial &m = merged[k];
    double *row = stats + k * NFIELDS;
    int64_t *hrow = hist + k * NBINS;
    const uint64_t infs = m.hist[NBINS - 1] - m.nan;
    const bool any_finite = (uint64_t)refs[k].numel > m.nan + infs;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    row[NUMEL] = (double)refs[k].numel;
    row[SUM] = m.sum;
    row[SUMSQ] = m.sumsq;
    row[NORM] = std::sqrt(m.sumsq);
    row[ABSMAX] = any_finite ? m.absmax : nan;
    row[MIN] = any_finite ? m.mn : nan;
    row[MAX] = any_finite ? m.mx : nan;
    row[ZEROS] = (double)m.zeros;
    row[TINY] = (double)m.tiny;
    row[LARGE] = (double)m.large;
    row[NAN_] = (double)m.nan;
    row[INF_] = (double)infs;
    hrow[0] = (int64_t)m.zeros;
    hrow[1] = (int64_t)(m.hist[0] - m.zeros + m.hist[1]);
    for (int b = 2; b < NBINS - 1; ++b) hrow[b] = (int64_t)m.hist[b];
    hrow[NBINS - 1] = (int64_t)infs;
  }
}

// [||a - b||, ||a||] per pair into out[n, 2]; touches no Python object.
void compute_updates(const std::vector<TensorRef> &ra, const std::vector<TensorRef> &rb, int threads, double *out) {
  const std::vector<WorkItem> items = cut(ra);
  std::vector<double> parts(items.size() * 2, 0.0);
  parallel_items((int64_t)items.size(), pick_threads(threads, 2 * total_numel(ra), PER_THREAD), [&](int64_t i) {
    const WorkItem &w = items[i];
    chunk_update(ra[w.tensor], rb[w.tensor], w.begin, w.end, &parts[2 * i]);
  });
  for (size_t i = 0; i < items.size(); ++i) {
    out[2 * items[i].tensor] += parts[2 * i];
    out[2 * items[i].tensor + 1] += parts[2 * i + 1];
  }
  for (size_t k = 0; k < 2 * ra.size(); ++k) out[k] = std::sqrt(out[k]);
}

// One computation over borrowed tensors, run inline or on its own thread. The array handles stay in
// the job (and are released by Python, with the GIL) so the tensors outlive the computation; the
// worker only reads raw memory.
class Job {
 public:
  enum Kind { STATS, UPDATES };

  // Stats job.
  Job(std::vector<AnyArray> arrays, double eps, double large, int threads, int reinterpret)
      : kind_(STATS), keep_(std::move(arrays)), eps_(eps), large_(large), threads_(threads) {
    check_threshold(eps, "eps");
    check_threshold(large, "large");
    a_ = refs_of(keep_, reinterpret, "tensors");
    out_.reset(new double[a_.size() * NFIELDS]());
    hist_.reset(new int64_t[a_.size() * NBINS]());
  }

  // Update-norm job.
  Job(std::vector<AnyArray> after, std::vector<AnyArray> before, int threads)
      : kind_(UPDATES), keep_(std::move(after)), keep_b_(std::move(before)), threads_(threads) {
    if (keep_.size() != keep_b_.size())
      throw nb::value_error(("update_norms: " + std::to_string(keep_.size()) + " tensors after but " +
                             std::to_string(keep_b_.size()) + " before").c_str());
    a_ = refs_of(keep_, 0, "after");
    b_ = refs_of(keep_b_, 0, "before");
    for (size_t k = 0; k < a_.size(); ++k)
      if (a_[k].numel != b_[k].numel || a_[k].kind != b_[k].kind)
        throw nb::value_error(("update_norms: pair " + std::to_string(k) + " differs in size or dtype").c_str());
    out_.reset(new double[a_.size() * 2]());
  }

  ~Job() {
    if (worker_.joinable()) worker_.join();
  }

  void start() {
    worker_ = std::thread([this] { run(); });
  }

  void run_inline() {
    nb::gil_scoped_release release;
    run();
  }

  bool done() const { return finished_.load(); }

  // The result (first call only): (stats, hist) for a stats job, the [n, 2] norms for an update job.
  nb::object result() {
    if (worker_.joinable()) {
      nb::gil_scoped_release release;
      worker_.join();
    }
    if (error_) std::rethrow_exception(error_);
    if (!out_) throw nb::value_error("the result of this job was already taken");
    const size_t n = a_.size();
    if (kind_ == STATS)
      return nb::make_tuple(owned_array(out_.release(), n, NFIELDS), owned_array(hist_.release(), n, NBINS));
    return nb::cast(owned_array(out_.release(), n, 2));
  }

 private:
  void run() {
    try {
      if (kind_ == STATS) compute_stats(a_, eps_, large_, threads_, out_.get(), hist_.get());
      else compute_updates(a_, b_, threads_, out_.get());
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_.store(true);
  }

  Kind kind_;
  std::vector<AnyArray> keep_, keep_b_;
  std::vector<TensorRef> a_, b_;
  double eps_ = 0, large_ = 0;
  int threads_ = 0;
  std::unique_ptr<double[]> out_;
  std::unique_ptr<int64_t[]> hist_;
  std::thread worker_;
  std::exception_ptr error_;
  std::atomic<bool> finished_{false};
};

nb::object tensor_stats_many(std::vector<AnyArray> arrays, double eps, double large, int threads, int reinterpret) {
  Job job(std::move(arrays), eps, large, threads, reinterpret);
  job.run_inline();
  return job.result();
}

nb::object update_norms(std::vector<AnyArray> after, std::vector<AnyArray> before, int threads) {
  Job job(std::move(after), std::move(before), threads);
  job.run_inline();
  return job.result();
}

Job *tensor_stats_start(std::vector<AnyArray> arrays, double eps, double large, int threads, int reinterpret) {
  auto job = new Job(std::move(arrays), eps, large, threads, reinterpret);
  job->start();
  return job;
}

Job *update_norms_start(std::vector<AnyArray> after, std::vector<AnyArray> before, int threads) {
  auto job = new Job(std::move(after), std::move(before), threads);
  job->start();
  return job;
}

}  // namespace

void register_stats(nb::module_ &m) {
  std::vector<std::string> fields(FIELD_NAMES, FIELD_NAMES + NFIELDS);
  m.attr("STAT_FIELDS") = nb::cast(fields);
  m.attr("HIST_LO") = HIST_LO;
  m.attr("HIST_HI") = HIST_HI;
  m.attr("HIST_BINS") = NBINS;
  m.attr("CHUNK") = CHUNK;
  m.def("tensor_stats_many", &tensor_stats_many, nb::arg("tensors"), nb::arg("eps"), nb::arg("large"),
        nb::arg("threads") = 0, nb::arg("reinterpret") = 0,
        "Fused statistics of many CPU tensors in one call (GIL released). Returns (stats[n, len(STAT_FIELDS)] "
        "float64, hist[n, HIST_BINS] int64).");
  m.def("update_norms", &update_norms, nb::arg("after"), nb::arg("before"), nb::arg("threads") = 0,
        "Per pair: [||after - before||, ||after||] as float64[n, 2] (GIL released).");
  nb::class_<Job>(m, "Job", "A computation running on its own native thread; result() waits for it.")
      .def("result", &Job::result, "Wait (GIL released) and return the result; raises what the computation raised.")
      .def_prop_ro("done", &Job::done);
  m.def("tensor_stats_start", &tensor_stats_start, nb::arg("tensors"), nb::arg("eps"), nb::arg("large"),
        nb::arg("threads") = 0, nb::arg("reinterpret") = 0, nb::rv_policy::take_ownership,
        "Start tensor_stats_many on a native thread; the tensors must not be written until result().");
  m.def("update_norms_start", &update_norms_start, nb::arg("after"), nb::arg("before"), nb::arg("threads") = 0,
        nb::rv_policy::take_ownership,
        "Start update_norms on a native thread; the tensors must not be written until result().");
}

}  // namespace debugtune
