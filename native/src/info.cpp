// Build facts of the native module: lets Python check which compiler and threads it got.
#include <string>
#include <thread>

#include <nanobind/stl/string.h>

#include "bindings.h"

namespace nb = nanobind;

namespace debugtune {

static std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

void register_info(nb::module_ &m) {
  m.def("compiler", &compiler, "Compiler that built the native probes.");
  m.def("hardware_threads", [] { return std::thread::hardware_concurrency(); },
        "Threads the native kernels may use (std::thread::hardware_concurrency).");
}

}  // namespace debugtune
