// Host backend from procfs: CPU utilisation (/proc/stat deltas), memory (/proc/meminfo) and the
// resident set size of this process (/proc/self/statm).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sampler.h"

namespace debugtune {

namespace {

class ProcBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  bool open(std::string &why) override {
    if (!read_cpu(prev_busy_, prev_total_)) {
      why = "/proc/stat not readable";
      return false;
    }
    page_ = (double)sysconf(_SC_PAGESIZE);
    return true;
  }

  std::vector<std::string> entities() const override { return {""}; }

  void sample(double t, int32_t base, std::vector<HwSample> &out) override {
    uint64_t busy = 0, total = 0;
    if (read_cpu(busy, total) && total > prev_total_) {
      out.push_back({t, base, CPU_UTIL_PCT, 100.0 * (double)(busy - prev_busy_) / (double)(total - prev_total_)});
      prev_busy_ = busy;
      prev_total_ = total;
    }
    double mem_total = 0, mem_avail = 0;
    if (read_meminfo(mem_total, mem_avail)) {
      out.push_back({t, base, HOST_MEM_TOTAL, mem_total});
      out.push_back({t, base, HOST_MEM_USED, mem_total - mem_avail});
    }
    std::ifstream statm("/proc/self/statm");
    double size = 0, resident = 0;
    if (statm >> size >> resident) out.push_back({t, base, RSS_BYTES, resident * page_});
  }

 private:
  // Busy and total jiffies of the "cpu" line (user nice system idle iowait irq softirq steal).
  static bool read_cpu(uint64_t &busy, uint64_t &total) {
    std::ifstream f("/proc/stat");
    std::string label;
    uint64_t v[8] = {};
    if (!(f >> label) || label != "cpu") return false;
    for (auto &x : v)
      if (!(f >> x)) return false;
    total = 0;
    for (auto x : v) total += x;
    busy = total - v[3] - v[4];
    return true;
  }

  static bool read_meminfo(double &total, double &avail) {
    std::ifstream f("/proc/meminfo");
    std::string line;
    bool has_total = false, has_avail = false;
    while (std::getline(f, line)) {
      unsigned long long kb = 0;
      if (std::sscanf(line.c_str(), "MemTotal: %llu kB", &kb) == 1) { total = 1024.0 * (double)kb; has_total = true; }
      else if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) { avail = 1024.0 * (double)kb; has_avail = true; }
    }
    return has_total && has_avail;
  }

  uint64_t prev_busy_ = 0, prev_total_ = 0;
  double page_ = 4096;
};

}  // namespace

std::unique_ptr<Backend> make_proc_backend() { return std::make_unique<ProcBackend>(); }

}  // namespace debugtune
