// NVIDIA backend: libnvidia-ml loaded with dlopen, symbols resolved with dlsym, minimal prototypes
// declared here (no vendor header): utilisation, memory, power and its enforced limit, temperature, SM clock,
// throttling (any clock-event reason of power or heat) and power throttling (the power ones alone).
#include <dlfcn.h>

#include "sampler.h"

namespace debugtune {

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void *;
struct nvmlUtilization_t { unsigned int gpu, memory; };
struct nvmlMemory_t { unsigned long long total, free, used; };
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1;
// SwPowerCap | HwSlowdown | SwThermalSlowdown | HwThermalSlowdown | HwPowerBrakeSlowdown
constexpr unsigned long long THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;
// SwPowerCap | HwPowerBrakeSlowdown
constexpr unsigned long long POWER_MASK = 0x4 | 0x80;

class NvmlBackend : public Backend {
 public:
  explicit NvmlBackend(std::vector<std::string> libs) : libs_(std::move(libs)) {}
  ~NvmlBackend() override {
    if (shutdown_ && initialised_) shutdown_();
    if (lib_) dlclose(lib_);
  }

  std::string name() const override { return "nvml"; }

  bool open(std::string &why) override {
    std::string loaded;
    lib_ = open_library(libs_, loaded, why);
    if (!lib_) return false;
    init_ = (nvmlReturn_t(*)())sym("nvmlInit_v2");
    shutdown_ = (nvmlReturn_t(*)())sym("nvmlShutdown");
    count_ = (nvmlReturn_t(*)(unsigned *))sym("nvmlDeviceGetCount_v2");
    handle_ = (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))sym("nvmlDeviceGetHandleByIndex_v2");
    util_ = (nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))sym("nvmlDeviceGetUtilizationRates");
    mem_ = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))sym("nvmlDeviceGetMemoryInfo");
    power_ = (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))sym("nvmlDeviceGetPowerUsage");
    limit_ = (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))sym("nvmlDeviceGetEnforcedPowerLimit");
    temp_ = (nvmlReturn_t(*)(nvmlDevice_t, int, unsigned *))sym("nvmlDeviceGetTemperature");
    clock_ = (nvmlReturn_t(*)(nvmlDevice_t, int, unsigned *))sym("nvmlDeviceGetClockInfo");
    throttle_ = (nvmlReturn_t(*)(nvmlDevice_t, unsigned long long *))sym("nvmlDeviceGetCurrentClocksEventReasons");
    if (!throttle_)
      throttle_ = (nvmlReturn_t(*)(nvmlDevice_t, unsigned long long *))sym("nvmlDeviceGetCurrentClocksThrottleReasons");
    const char *(*err)(nvmlReturn_t) = (const char *(*)(nvmlReturn_t))sym("nvmlErrorString");
    if (!init_ || !count_ || !handle_) {
      why = loaded + " lacks nvmlInit_v2/nvmlDeviceGetCount_v2/nvmlDeviceGetHandleByIndex_v2";
      return false;
    }
    if (nvmlReturn_t rc = init_(); rc != 0) {
      why = "nvmlInit_v2 failed: " + (err ? std::string(err(rc)) : "code " + std::to_string(rc));
      return false;
    }
    initialised_ = true;
    unsigned n = 0;
    if (count_(&n) != 0 || n == 0) {
      why = "NVML reports no GPU";
      return false;
    }
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (handle_(i, &d) == 0) {
        devices_.push_back(d);
        names_.push_back("device:gpu" + std::to_string(i));
      }
    }
    if (devices_.empty()) why = "no NVML device handle could be opened";
    return !devices_.empty();
  }

  std::vector<std::string> entities() const override { return names_; }

  void sample(double t, int32_t base, std::vector<HwSample> &out) override {
    for (size_t i = 0; i < devices_.size(); ++i) {
      nvmlDevice_t d = devices_[i];
      const int32_t e = base + (int32_t)i;
      nvmlUtilization_t u{};
      if (util_ && util_(d, &u) == 0) out.push_back({t, e, UTIL_PCT, (double)u.gpu});
      nvmlMemory_t m{};
      if (mem_ && mem_(d, &m) == 0) {
        out.push_back({t, e, MEM_USED, (double)m.used});
        out.push_back({t, e, MEM_TOTAL, (double)m.total});
      }
      unsigned v = 0;
      if (power_ && power_(d, &v) == 0) out.push_back({t, e, POWER_W, v / 1000.0});  // milliwatts
      if (limit_ && limit_(d, &v) == 0) out.push_back({t, e, POWER_LIMIT_W, v / 1000.0});  // milliwatts
      if (temp_ && temp_(d, NVML_TEMPERATURE_GPU, &v) == 0) out.push_back({t, e, TEMP_C, (double)v});
      if (clock_ && clock_(d, NVML_CLOCK_SM, &v) == 0) out.push_back({t, e, CLOCK_MHZ, (double)v});
      unsigned long long reasons = 0;
      if (throttle_ && throttle_(d, &reasons) == 0) {
        out.push_back({t, e, THROTTLE, (reasons & THROTTLE_MASK) ? 1.0 : 0.0});
        out.push_back({t, e, THROTTLE_POWER, (reasons & POWER_MASK) ? 1.0 : 0.0});
      }
    }
  }

 private:
  void *sym(const char *s) { return dlsym(lib_, s); }

  std::vector<std::string> libs_;
  void *lib_ = nullptr;
  bool initialised_ = false;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned *) = nullptr;
  nvmlReturn_t (*handle_)(unsigned, nvmlDevice_t *) = nullptr;
  nvmlReturn_t (*util_)(nvmlDevice_t, nvmlUtilization_t *) = nullptr;
  nvmlReturn_t (*mem_)(nvmlDevice_t, nvmlMemory_t *) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned *) = nullptr;
  nvmlReturn_t (*limit_)(nvmlDevice_t, unsigned *) = nullptr;
  nvmlReturn_t (*temp_)(nvmlDevice_t, int, unsigned *) = nullptr;
  nvmlReturn_t (*clock_)(nvmlDevice_t, int, unsigned *) = nullptr;
  nvmlReturn_t (*throttle_)(nvmlDevice_t, unsigned long long *) = nullptr;
  std::vector<nvmlDevice_t> devices_;
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<Backend> make_nvml_backend(std::vector<std::string> libs) {
  return std::make_unique<NvmlBackend>(std::move(libs));
}

}  // namespace debugtune
