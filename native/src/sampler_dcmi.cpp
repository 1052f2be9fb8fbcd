// Ascend backend: libdcmi loaded with dlopen, symbols resolved with dlsym, minimal prototypes
// declared here (no vendor header): AI Core utilisation, HBM used/total, power, temperature and the
// AI Core clock of every NPU chip (card, device) the driver lists.
#include <dlfcn.h>

#include <cstring>

#include "sampler.h"

namespace debugtune {

namespace {

// struct dcmi_hbm_info as documented by the Ascend DCMI API (memory sizes in MB). It is read from
// a zeroed, larger buffer so that a driver with a longer struct cannot write past our storage.
struct DcmiHbmInfo {
  unsigned long long memory_size;
  unsigned int freq;
  unsigned long long memory_usage;
  int temp;
  unsigned int bandwith_util_rate;
};
constexpr int DCMI_UTIL_AICORE = 2;     // dcmi_get_device_utilization_rate input_type
constexpr int DCMI_FREQ_AICORE_NOW = 7;  // dcmi_get_device_frequency input_type (current AI Core clock)

class DcmiBackend : public Backend {
 public:
  explicit DcmiBackend(std::vector<std::string> libs) : libs_(std::move(libs)) {}
  ~DcmiBackend() override {
    if (lib_) dlclose(lib_);
  }

  std::string name() const override { return "dcmi"; }

  bool open(std::string &why) override {
    std::string loaded;
    lib_ = open_library(libs_, loaded, why);
    if (!lib_) return false;
    auto init = (int (*)())dlsym(lib_, "dcmi_init");
    auto cards = (int (*)(int *, int *, int))dlsym(lib_, "dcmi_get_card_list");
    auto per_card = (int (*)(int, int *))dlsym(lib_, "dcmi_get_device_num_in_card");
    util_ = (int (*)(int, int, int, unsigned *))dlsym(lib_, "dcmi_get_device_utilization_rate");
    hbm_ = (int (*)(int, int, void *))dlsym(lib_, "dcmi_get_device_hbm_info");
    power_ = (int (*)(int, int, int *))dlsym(lib_, "dcmi_get_device_power_info");
    temp_ = (int (*)(int, int, int *))dlsym(lib_, "dcmi_get_device_temperature");
    freq_ = (int (*)(int, int, int, unsigned *))dlsym(lib_, "dcmi_get_device_frequency");
    if (!init || !cards || !per_card) {
      why = loaded + " lacks dcmi_init/dcmi_get_card_list/dcmi_get_device_num_in_card";
      return false;
    }
    if (int rc = init(); rc != 0) {
      why = "dcmi_init failed with code " + std::to_string(rc);
      return false;
    }
    int ids[64] = {}, n = 0;
    if (int rc = cards(&n, ids, 64); rc != 0 || n <= 0) {
      why = rc ? "dcmi_get_card_list failed with code " + std::to_string(rc) : "DCMI lists no NPU card";
      return false;
    }
    for (int c = 0; c < n && c < 64; ++c) {
      int devices = 0;
      if (per_card(ids[c], &devices) != 0) continue;
      for (int d = 0; d < devices; ++d) {
        chips_.push_back({ids[c], d});
        names_.push_back("device:npu" + std::to_string(names_.size()));
      }
    }
    if (chips_.empty()) why = "DCMI lists no NPU chip";
    return !chips_.empty();
  }

  std::vector<std::string> entities() const override { return names_; }

  void sample(double t, int32_t base, std::vector<HwSample> &out) override {
    for (size_t i = 0; i < chips_.size(); ++i) {
      const int card = chips_[i].first, dev = chips_[i].second;
      const int32_t e = base + (int32_t)i;
      unsigned u = 0;
      int v = 0;
      if (util_ && util_(card, dev, DCMI_UTIL_AICORE, &u) == 0) out.push_back({t, e, UTIL_PCT, (double)u});
      alignas(16) unsigned char raw[256] = {};
      if (hbm_ && hbm_(card, dev, raw) == 0) {
        DcmiHbmInfo h;
        std::memcpy(&h, raw, sizeof(h));
        out.push_back({t, e, MEM_USED, (double)h.memory_usage * 1048576.0});
        out.push_back({t, e, MEM_TOTAL, (double)h.memory_size * 1048576.0});
      }
      if (power_ && power_(card, dev, &v) == 0) out.push_back({t, e, POWER_W, v / 10.0});  // 0.1 W units
      if (temp_ && temp_(card, dev, &v) == 0) out.push_back({t, e, TEMP_C, (double)v});
      if (freq_ && freq_(card, dev, DCMI_FREQ_AICORE_NOW, &u) == 0) out.push_back({t, e, CLOCK_MHZ, (double)u});
    }
  }

 private:
  std::vector<std::string> libs_;
  void *lib_ = nullptr;
  int (*util_)(int, int, int, unsigned *) = nullptr;
  int (*hbm_)(int, int, void *) = nullptr;
  int (*power_)(int, int, int *) = nullptr;
  int (*temp_)(int, int, int *) = nullptr;
  int (*freq_)(int, int, int, unsigned *) = nullptr;
  std::vector<std::pair<int, int>> chips_;
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<Backend> make_dcmi_backend(std::vector<std::string> libs) {
  return std::make_unique<DcmiBackend>(std::move(libs));
}

}  // namespace debugtune
