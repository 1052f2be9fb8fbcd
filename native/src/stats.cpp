// Fused tensor statistics over many tensors in one call: work split, threads, merge and the Python
// binding (the per-chunk kernels are in stats_kernel.cpp). One read of every element gives numel, sum,
// sum of squares, abs-max, min, max, zeros, tiny (|x| < eps), large (|x| >= large), NaN and Inf counts
// and, when asked, a log2 magnitude histogram; plus the fused update/weight norms of an optimizer step.
//
// Determinism: a tensor is cut into fixed chunks of CHUNK elements whatever the thread count; each
// chunk is reduced in a fixed lane order and the chunks are merged in index order, so the result is
// bit-for-bit the same with 1 or N threads.
#include <cmath>
#include <cstdint>
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

// Per-chunk work of one statistics call; holds no Python object, so background helpers may own it.
struct StatsWork {
  std::vector<TensorRef> refs;
  StatsOptions opt;
  std::vector<WorkItem> items;
  std::vector<Partial> parts;  // one per item
};

// Per-chunk work of one update-norm call: [sum (a - b)^2, sum a^2] per item.
struct UpdateWork {
  std::vector<TensorRef> a, b;
  std::vector<WorkItem> items;
  std::vector<double> parts;  // two per item
};

// Merges the chunks of w in item order (deterministic) into stats[n, NFIELDS] and, when w.opt.hist,
// hist[n, NBINS].
void merge_stats(const StatsWork &w, double *stats, int64_t *hist) {
  const size_t n = w.refs.size();
  std::vector<Partial> merged(n);
  for (size_t i = 0; i < w.items.size(); ++i) {
    Partial &m = merged[w.items[i].tensor];
    const Partial &p = w.parts[i];
    m.sum += p.sum;
    m.sumsq += p.sumsq;
    m.mn = std::min(m.mn, p.mn);
    m.mx = std::max(m.mx, p.mx);
    m.absmax = std::max(m.absmax, p.absmax);
    m.zeros += p.zeros;
    m.tiny += p.tiny;
    m.large += p.large;
    m.nan += p.nan;
    m.nonfinite += p.nonfinite;
    if (w.opt.hist)
      for (int k = 0; k < NBINS; ++k) m.hist[k] += p.hist[k];
  }
  for (size_t k = 0; k < n; ++k) {
    const Partial &m = merged[k];
    double *row = stats + k * NFIELDS;
    const uint64_t infs = m.nonfinite - m.nan;
    const bool any_finite = (uint64_t)w.refs[k].numel > m.nonfinite;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    row[NUMEL] = (double)w.refs[k].numel;
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
    if (!w.opt.hist) continue;
    int64_t *hrow = hist + k * NBINS;
    hrow[0] = (int64_t)m.zeros;
    hrow[1] = (int64_t)(m.hist[0] - m.zeros + m.hist[1]);
    for (int b = 2; b < NBINS - 1; ++b) hrow[b] = (int64_t)m.hist[b];
    hrow[NBINS - 1] = (int64_t)infs;
  }
}

// [||a - b||, ||a||] per pair into out[n, 2] (zeroed), merging the chunks in item order.
void merge_updates(const UpdateWork &w, double *out) {
  for (size_t i = 0; i < w.items.size(); ++i) {
    out[2 * w.items[i].tensor] += w.parts[2 * i];
    out[2 * w.items[i].tensor + 1] += w.parts[2 * i + 1];
  }
  for (size_t k = 0; k < 2 * w.a.size(); ++k) out[k] = std::sqrt(out[k]);
}

// One computation over borrowed tensors: its chunks form an ItemPool that helper threads (started by
// start()) and the thread asking for the result share. The array handles stay in the job (released by
// Python, with the GIL) and outlive every read of tensor memory: result() and the destructor return only
// once every chunk is finished.
class Job {
 public:
  enum Kind { STATS, UPDATES };

  // Stats job.
  Job(std::vector<AnyArray> arrays, double eps, double large, int reinterpret, bool hist)
      : kind_(STATS), keep_(std::move(arrays)) {
    check_threshold(eps, "eps");
    check_threshold(large, "large");
    auto w = std::make_shared<StatsWork>();
    w->opt.eps = eps;
    w->opt.large = large;
    w->opt.hist = hist;
    w->refs = refs_of(keep_, reinterpret, "tensors");
    w->items = cut(w->refs);
    w->parts.resize(w->items.size());
    numel_ = total_numel(w->refs);
    pool_ = std::make_shared<ItemPool>((int64_t)w->items.size(), [w](int64_t i) {
      const WorkItem &it = w->items[i];
      chunk_stats(w->refs[it.tensor], it.begin, it.end, w->opt, w->parts[i]);
    });
    stats_ = std::move(w);
  }

  // Update-norm job.
  Job(std::vector<AnyArray> after, std::vector<AnyArray> before)
      : kind_(UPDATES), keep_(std::move(after)), keep_b_(std::move(before)) {
    if (keep_.size() != keep_b_.size())
      throw nb::value_error(("update_norms: " + std::to_string(keep_.size()) + " tensors after but " +
                             std::to_string(keep_b_.size()) + " before").c_str());
    auto w = std::make_shared<UpdateWork>();
    w->a = refs_of(keep_, 0, "after");
    w->b = refs_of(keep_b_, 0, "before");
    for (size_t k = 0; k < w->a.size(); ++k)
      if (w->a[k].numel != w->b[k].numel || w->a[k].kind != w->b[k].kind)
        throw nb::value_error(("update_norms: pair " + std::to_string(k) + " differs in size or dtype").c_str());
    w->items = cut(w->a);
    w->parts.assign(2 * w->items.size(), 0.0);
    numel_ = 2 * total_numel(w->a);
    pool_ = std::make_shared<ItemPool>((int64_t)w->items.size(), [w](int64_t i) {
      const WorkItem &it = w->items[i];
      chunk_update(w->a[it.tensor], w->b[it.tensor], it.begin, it.end, &w->parts[2 * i]);
    });
    updates_ = std::move(w);
  }

  ~Job() {
    try {
      pool_->wait();  // normally a no-op: result() already waited
    } catch (...) {
    }
  }

  // Starts background helper threads (idle priority) on the chunks: `threads` of them, or as many as the
  // work wants when 0.
  void start(int threads) {
    ItemPool::start_helpers(pool_, pick_threads(threads, numel_, PER_THREAD), ItemPool::Priority::Idle);
  }

  // Inline: `threads` in all (0 = as many as the work wants), the calling thread being one of them.
  nb::object run_inline(int threads) {
    ItemPool::start_helpers(pool_, pick_threads(threads, numel_, PER_THREAD) - 1, ItemPool::Priority::Normal);
    return result();
  }

  bool done() const { return pool_->done(); }

  // The result (first call only): (stats, hist or None) for a stats job, the [n, 2] norms for an update job.
  // Takes the chunks no helper has started (GIL released), waits for those in progress, merges.
  nb::object result() {
    {
      nb::gil_scoped_release release;
      pool_->wait();
    }
    if (taken_) throw nb::value_error("the result of this job was already taken");
    taken_ = true;
    if (kind_ == UPDATES) {
      const size_t n = updates_->a.size();
      std::unique_ptr<double[]> out(new double[n * 2]());
      merge_updates(*updates_, out.get());
      return nb::cast(owned_array(out.release(), n, 2));
    }
    const size_t n = stats_->refs.size();
    std::unique_ptr<double[]> out(new double[n * NFIELDS]());
    std::unique_ptr<int64_t[]> hist(stats_->opt.hist ? new int64_t[n * NBINS]() : nullptr);
    merge_stats(*stats_, out.get(), hist.get());
    nb::object values = nb::cast(owned_array(out.release(), n, NFIELDS));
    if (!hist) return nb::make_tuple(values, nb::none());
    return nb::make_tuple(values, owned_array(hist.release(), n, NBINS));
  }

 private:
  Kind kind_;
  std::vector<AnyArray> keep_, keep_b_;
  std::shared_ptr<StatsWork> stats_;
  std::shared_ptr<UpdateWork> updates_;
  std::shared_ptr<ItemPool> pool_;
  int64_t numel_ = 0;
  bool taken_ = false;
};

nb::object tensor_stats_many(std::vector<AnyArray> arrays, double eps, double large, int threads, int reinterpret,
                             bool hist) {
  Job job(std::move(arrays), eps, large, reinterpret, hist);
  return job.run_inline(threads);
}

nb::object update_norms(std::vector<AnyArray> after, std::vector<AnyArray> before, int threads) {
  Job job(std::move(after), std::move(before));
  return job.run_inline(threads);
}

Job *tensor_stats_start(std::vector<AnyArray> arrays, double eps, double large, int threads, int reinterpret,
                        bool hist) {
  auto job = new Job(std::move(arrays), eps, large, reinterpret, hist);
  job->start(threads);
  return job;
}

Job *update_norms_start(std::vector<AnyArray> after, std::vector<AnyArray> before, int threads) {
  auto job = new Job(std::move(after), std::move(before));
  job->start(threads);
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
        nb::arg("threads") = 0, nb::arg("reinterpret") = 0, nb::arg("hist") = true,
        "Fused statistics of many CPU tensors in one call (GIL released). Returns (stats[n, len(STAT_FIELDS)] "
        "float64, hist[n, HIST_BINS] int64 or None without hist).");
  m.def("update_norms", &update_norms, nb::arg("after"), nb::arg("before"), nb::arg("threads") = 0,
        "Per pair: [||after - before||, ||after||] as float64[n, 2] (GIL released).");
  nb::class_<Job>(m, "Job", "A computation running on background native threads; result() finishes it.")
      .def("result", &Job::result,
           "Do the chunks no thread has started, wait for the others (GIL released) and return the result; "
           "raises what the computation raised.")
      .def_prop_ro("done", &Job::done);
  m.def("tensor_stats_start", &tensor_stats_start, nb::arg("tensors"), nb::arg("eps"), nb::arg("large"),
        nb::arg("threads") = 0, nb::arg("reinterpret") = 0, nb::arg("hist") = true, nb::rv_policy::take_ownership,
        "Start tensor_stats_many on background native threads; the tensors must not be written until result(), "
        "which takes over the chunks no thread has started yet.");
  m.def("update_norms_start", &update_norms_start, nb::arg("after"), nb::arg("before"), nb::arg("threads") = 0,
        nb::rv_policy::take_ownership,
        "Start update_norms on background native threads; the tensors must not be written until result().");
}

}  // namespace debugtune
