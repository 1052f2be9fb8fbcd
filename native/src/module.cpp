// The debugtune.native._native extension module: one entry point, many probe files.
#include "bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "debugtune native probes (C++17, nanobind)";
  // A probe the user never closed still holds a sampler or detectors at interpreter exit; that is not a
  // reference-counting bug worth a warning on every such exit.
  nanobind::set_leak_warnings(false);
  debugtune::register_info(m);
  debugtune::register_stats(m);
  debugtune::register_detectors(m);
  debugtune::register_sampler(m);
  debugtune::register_copy(m);
}
