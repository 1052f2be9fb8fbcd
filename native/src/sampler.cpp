// Background hardware sampler: a native thread (never touching Python, so off the GIL) samples every
// open backend at a fixed interval into a bounded ring buffer that Python drains. When the ring is
// full the oldest samples are overwritten and counted as dropped.
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "sampler.h"

namespace debugtune {

namespace nb = nanobind;

const char *HW_METRIC_NAMES[N_HW_METRICS] = {
    "cpu_util_pct", "host_mem_used_bytes", "host_mem_total_bytes", "rss_bytes", "util_pct", "mem_used_bytes",
    "mem_total_bytes", "power_w", "temp_c", "clock_mhz", "throttle", "power_limit_w", "throttle_power"};

void *open_library(const std::vector<std::string> &libs, std::string &loaded, std::string &why) {
  std::string errors;
  for (const auto &lib : libs) {
    if (void *h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      loaded = lib;
      return h;
    }
    const char *e = dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e ? e : lib + ": dlopen failed");
  }
  why = (libs.empty() ? std::string("no library named") : libs.front() + " not found") + " (" + errors + ")";
  return nullptr;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Status {
  std::string backend;
  bool active;
  std::string reason;
  std::vector<std::string> entities;
};

class HardwareSampler {
 public:
  HardwareSampler(double interval, size_t capacity, const std::vector<std::string> &backends,
                  const std::vector<std::string> &nvml_libs, const std::vector<std::string> &dcmi_libs)
      : interval_(interval), ring_(std::max<size_t>(capacity, 1)) {
    if (!(interval > 0)) throw nb::value_error("interval must be > 0 seconds");
    for (const auto &name : backends) {
      std::unique_ptr<Backend> b;
      if (name == "cpu") b = make_proc_backend();
      else if (name == "nvml") b = make_nvml_backend(nvml_libs);
      else if (name == "dcmi") b = make_dcmi_backend(dcmi_libs);
      else throw nb::value_error(("unknown sampler backend '" + name + "' (cpu, nvml, dcmi)").c_str());
      std::string why;
      const bool ok = b->open(why);
      Status st{name, ok, ok ? "" : why, {}};
      if (ok) {
        st.entities = b->entities();
        bases_.push_back((int32_t)entities_.size());
        entities_.insert(entities_.end(), st.entities.begin(), st.entities.end());
        active_.push_back(std::move(b));
      }
      status_.push_back(std::move(st));
    }
  }

  ~HardwareSampler() { stop(); }

  void start() {
    std::lock_guard<std::mutex> lk(control_);
    if (thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> w(wake_mu_);
      stop_ = false;
    }
    thread_ = std::thread([this] { loop(); });
  }

  void stop() {
    std::lock_guard<std::mutex> lk(control_);
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> w(wake_mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  bool running() {
    std::lock_guard<std::mutex> lk(control_);
    return thread_.joinable();
  }

  // One sample of every active backend, now, on the calling thread.
  void sample_now() {
    std::lock_guard<std::mutex> lk(sample_mu_);
    scratch_.clear();
    const double t = now_s();
    for (size_t i = 0; i < active_.size(); ++i) active_[i]->sample(t, bases_[i], scratch_);
    std::lock_guard<std::mutex> r(ring_mu_);
    for (const auto &s : scratch_) push(s);
  }

  nb::tuple drain() {
    std::vector<HwSample> out;
    {
      std::lock_guard<std::mutex> r(ring_mu_);
      out.reserve(count_);
      for (size_t i = 0; i < count_; ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
      head_ = count_ = 0;
    }
    const size_t n = out.size();
    double *t = new double[n], *v = new double[n];
    int32_t *e = new int32_t[n], *m = new int32_t[n];
    for (size_t i = 0; i < n; ++i) {
      t[i] = out[i].t;
      e[i] = out[i].entity;
      m[i] = out[i].metric;
      v[i] = out[i].value;
    }
    auto f64 = [n](double *p) {
      return nb::ndarray<nb::numpy, double, nb::ndim<1>>(p, {n}, nb::capsule(p, [](void *q) noexcept { delete[] (double *)q; }));
    };
    auto i32 = [n](int32_t *p) {
      return nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(p, {n}, nb::capsule(p, [](void *q) noexcept { delete[] (int32_t *)q; }));
    };
    return nb::make_tuple(f64(t), i32(e), i32(m), f64(v));
  }

  nb::list status() const {
    nb::list out;
    for (const auto &s : status_) {
      nb::dict d;
      d["backend"] = s.backend;
      d["active"] = s.active;
      d["reason"] = s.reason;
      d["entities"] = s.entities;
      out.append(d);
    }
    return out;
  }

  const std::vector<std::string> &entities() const { return entities_; }
  uint64_t dropped() {
    std::lock_guard<std::mutex> r(ring_mu_);
    return dropped_;
  }
  double interval() const { return interval_; }

 private:
  void push(const HwSample &s) {
    if (count_ == ring_.size()) {
      ring_[head_] = s;
      head_ = (head_ + 1) % ring_.size();
      ++dropped_;
    } else {
      ring_[(head_ + count_) % ring_.size()] = s;
      ++count_;
    }
  }

  void loop() {
    const auto period = std::chrono::duration<double>(interval_);
    for (;;) {
      sample_now();
      std::unique_lock<std::mutex> w(wake_mu_);
      if (wake_.wait_for(w, period, [this] { return stop_; })) return;
    }
  }

  double interval_;
  std::vector<std::unique_ptr<Backend>> active_;
  std::vector<int32_t> bases_;
  std::vector<std::string> entities_;
  std::vector<Status> status_;

  std::mutex sample_mu_;
  std::vector<HwSample> scratch_;

  std::mutex ring_mu_;
  std::vector<HwSample> ring_;
  size_t head_ = 0, count_ = 0;
  uint64_t dropped_ = 0;

  std::mutex control_, wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

void register_sampler(nb::module_ &m) {
  m.attr("HW_METRICS") = nb::cast(std::vector<std::string>(HW_METRIC_NAMES, HW_METRIC_NAMES + N_HW_METRICS));
  nb::class_<HardwareSampler>(m, "HardwareSampler")
      .def(nb::init<double, size_t, const std::vector<std::string> &, const std::vector<std::string> &,
                    const std::vector<std::string> &>(),
           nb::arg("interval"), nb::arg("capacity"), nb::arg("backends"), nb::arg("nvml_libs"), nb::arg("dcmi_libs"))
      .def("start", &HardwareSampler::start)
      .def("stop", &HardwareSampler::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("sample_now", &HardwareSampler::sample_now, nb::call_guard<nb::gil_scoped_release>())
      .def("drain", &HardwareSampler::drain, "Samples since the last drain: (t, entity, metric, value) arrays.")
      .def("status", &HardwareSampler::status)
      .def_prop_ro("entities", &HardwareSampler::entities)
      .def_prop_ro("dropped", &HardwareSampler::dropped)
      .def_prop_ro("running", &HardwareSampler::running)
      .def_prop_ro("interval", &HardwareSampler::interval);
}

}  // namespace debugtune
