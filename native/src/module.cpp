// The debugtune.native._native extension module: one entry point, many probe files.
#include "bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "debugtune native probes (C++17, nanobind)";
  debugtune::register_info(m);
}
