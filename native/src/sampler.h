// The hardware sampler's backends: each reads one kind of counter source and appends samples.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace debugtune {

// Metric ids of a sample; names are the telemetry metric names (engine/telemetry/schema.py).
enum HwMetric : int32_t {
  CPU_UTIL_PCT, HOST_MEM_USED, HOST_MEM_TOTAL, RSS_BYTES,
  UTIL_PCT, MEM_USED, MEM_TOTAL, POWER_W, TEMP_C, CLOCK_MHZ, THROTTLE,
  POWER_LIMIT_W, THROTTLE_POWER,
  N_HW_METRICS
};

struct HwSample {
  double t;        // seconds since the Unix epoch
  int32_t entity;  // index into the sampler's entity list ("" = host, "device:<name>")
  int32_t metric;  // HwMetric
  double value;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Opens the source; on failure returns false and says why (e.g. "libnvidia-ml.so.1 not found").
  virtual bool open(std::string &why) = 0;
  // Entity names of what it measures, in order; sample() numbers them from `base`.
  virtual std::vector<std::string> entities() const = 0;
  virtual void sample(double t, int32_t base, std::vector<HwSample> &out) = 0;
};

std::unique_ptr<Backend> make_proc_backend();
std::unique_ptr<Backend> make_nvml_backend(std::vector<std::string> libs);
std::unique_ptr<Backend> make_dcmi_backend(std::vector<std::string> libs);

// dlopen the first library that loads; on failure `why` lists what was tried.
void *open_library(const std::vector<std::string> &libs, std::string &loaded, std::string &why);

}  // namespace debugtune
