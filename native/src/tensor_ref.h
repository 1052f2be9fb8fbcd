// A borrowed, read-only view of a CPU tensor that arrived through nanobind (DLPack or the buffer
// protocol) without a copy, and the block loader that turns any layout and element type into
// contiguous float/double blocks the kernels read.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>

namespace debugtune {

namespace nb = nanobind;

// Any dtype, any layout, CPU only, read-only: nanobind never converts (and so never copies) such an array.
using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

enum class Kind : int { F32 = 0, F16 = 1, BF16 = 2, F64 = 3 };

// How a 16-bit unsigned integer array is to be read (numpy has no bfloat16 without ml_dtypes).
enum class Reinterpret : int { None = 0, AsF16 = 1, AsBF16 = 2 };

struct TensorRef {
  const uint8_t *data = nullptr;  // first element
  Kind kind = Kind::F32;
  int64_t numel = 0;
  int itemsize = 4;
  // Coalesced layout: dimensions of extent 1 dropped, mergeable neighbours merged; strides in elements.
  std::vector<int64_t> shape, strides;
  bool contiguous = true;  // one run of stride 1 (or empty)
};

// Builds the view; throws nb::type_error naming the dtype when it is not a supported float type.
TensorRef make_ref(const AnyArray &a, Reinterpret how, const std::string &what);

inline uint32_t f32_bits(float v) { uint32_t b; std::memcpy(&b, &v, 4); return b; }
inline float f32_from_bits(uint32_t b) { float v; std::memcpy(&v, &b, 4); return v; }
inline uint64_t f64_bits(double v) { uint64_t b; std::memcpy(&b, &v, 8); return b; }
inline double f64_from_bits(uint64_t b) { double v; std::memcpy(&v, &b, 8); return v; }

// IEEE half → float with integer arithmetic and one subtraction of normal numbers, so the result is
// exact for normals, subnormals, ±0, ±Inf and NaN even when the thread flushes denormals (DAZ/FTZ).
inline float half_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (uint32_t)(h & 0x7fffu) << 13;
  const uint32_t exp = o & shifted_exp;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // Inf / NaN keep their payload
  } else if (exp == 0) {
    o += 1u << 23;  // subnormal: renormalise by subtracting 2^-14 as a float
    o = f32_bits(f32_from_bits(o) - f32_from_bits(113u << 23));
  }
  return f32_from_bits(o | ((uint32_t)(h & 0x8000u) << 16));
}

inline float bf16_to_float(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

// Float type the kernels compute in for a tensor kind (double only for float64 input).
template <typename F> inline bool kind_uses(Kind k) {
  return std::is_same<F, double>::value ? k == Kind::F64 : k != Kind::F64;
}

// Elements [start, start + n) in row-major order as F. Returns a pointer into the tensor itself
// when it is contiguous and already of type F, otherwise fills and returns `buf` (n ≤ its size).
template <typename F> const F *load_block(const TensorRef &t, int64_t start, int64_t n, F *buf);

}  // namespace debugtune
