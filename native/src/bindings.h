// Registration hooks: each probe source file adds its functions to the one extension module.
#pragma once
#include <nanobind/nanobind.h>

namespace debugtune {
void register_info(nanobind::module_ &m);
void register_stats(nanobind::module_ &m);
void register_detectors(nanobind::module_ &m);
void register_sampler(nanobind::module_ &m);
void register_copy(nanobind::module_ &m);
}  // namespace debugtune
