// Borrowed tensor views and the block loader (any layout, f32/f16/bf16/f64 → contiguous F).
#include "tensor_ref.h"

#include <algorithm>

namespace debugtune {

static std::string dtype_name(const nb::dlpack::dtype &d) {
  const char *code = "?";
  switch (d.code) {
    case (uint8_t)nb::dlpack::dtype_code::Int: code = "int"; break;
    case (uint8_t)nb::dlpack::dtype_code::UInt: code = "uint"; break;
    case (uint8_t)nb::dlpack::dtype_code::Float: code = "float"; break;
    case (uint8_t)nb::dlpack::dtype_code::Bfloat: code = "bfloat"; break;
    case (uint8_t)nb::dlpack::dtype_code::Complex: code = "complex"; break;
    case (uint8_t)nb::dlpack::dtype_code::Bool: code = "bool"; break;
    default: break;
  }
  return std::string(code) + std::to_string(d.bits) + (d.lanes > 1 ? "x" + std::to_string(d.lanes) : "");
}

static Kind kind_of(const nb::dlpack::dtype &d, Reinterpret how, const std::string &what) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes == 1) {
    if (d.code == (uint8_t)C::Float && d.bits == 32) return Kind::F32;
    if (d.code == (uint8_t)C::Float && d.bits == 16) return Kind::F16;
    if (d.code == (uint8_t)C::Float && d.bits == 64) return Kind::F64;
    if (d.code == (uint8_t)C::Bfloat && d.bits == 16) return Kind::BF16;
    if ((d.code == (uint8_t)C::UInt || d.code == (uint8_t)C::Int) && d.bits == 16) {
      if (how == Reinterpret::AsBF16) return Kind::BF16;
      if (how == Reinterpret::AsF16) return Kind::F16;
    }
  }
  throw nb::type_error((what + ": unsupported dtype " + dtype_name(d) +
                        " (expected float32, float16, bfloat16 or float64; a uint16 array needs "
                        "reinterpret='bfloat16' or 'float16')").c_str());
}

TensorRef make_ref(const AnyArray &a, Reinterpret how, const std::string &what) {
  TensorRef t;
  t.kind = kind_of(a.dtype(), how, what);
  t.itemsize = (int)a.itemsize();
  t.data = (const uint8_t *)a.data();
  t.numel = 1;
  std::vector<int64_t> shape, strides;
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.numel *= (int64_t)a.shape(i);
    if (a.shape(i) != 1) {
      shape.push_back((int64_t)a.shape(i));
      strides.push_back(a.stride(i));
    }
  }
  if (t.numel == 0) {
    shape.clear();
    strides.clear();
  }
  // Merge dimension i into i-1 when stepping the outer one equals a full run of the inner one.
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!t.shape.empty() && t.strides.back() == strides[i] * shape[i]) {
      t.shape.back() *= shape[i];
      t.strides.back() = strides[i];
    } else {
      t.shape.push_back(shape[i]);
      t.strides.push_back(strides[i]);
    }
  }
  if (t.shape.size() > 64) throw nb::value_error((what + ": more than 64 non-trivial dimensions").c_str());
  t.contiguous = t.shape.empty() || (t.shape.size() == 1 && t.strides[0] == 1);
  return t;
}

namespace {

template <typename F> struct Convert;
template <> struct Convert<float> {
  static float get(const uint8_t *p, Kind k) {
    uint16_t h;
    switch (k) {
      case Kind::F32: { float v; std::memcpy(&v, p, 4); return v; }
      case Kind::F16: std::memcpy(&h, p, 2); return half_to_float(h);
      case Kind::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
      default: return 0.0f;
    }
  }
};
template <> struct Convert<double> {
  static double get(const uint8_t *p, Kind) { double v; std::memcpy(&v, p, 8); return v; }
};

// `count` elements from p, `step` bytes apart, converted into out.
template <typename F> void convert_run(const uint8_t *p, int64_t step, int64_t count, Kind k, F *out) {
  if (k == Kind::F16 && step == 2) {
    const uint16_t *h = (const uint16_t *)p;
    for (int64_t i = 0; i < count; ++i) out[i] = (F)half_to_float(h[i]);
  } else if (k == Kind::BF16 && step == 2) {
    const uint16_t *h = (const uint16_t *)p;
    for (int64_t i = 0; i < count; ++i) out[i] = (F)bf16_to_float(h[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = Convert<F>::get(p + i * step, k);
  }
}

}  // namespace

template <typename F> const F *load_block(const TensorRef &t, int64_t start, int64_t n, F *buf) {
  const int64_t item = t.itemsize;
  if (t.contiguous) {
    const uint8_t *p = t.data + start * item;
    if ((sizeof(F) == 4 && t.kind == Kind::F32) || (sizeof(F) == 8 && t.kind == Kind::F64)) return (const F *)p;
    convert_run<F>(p, item, n, t.kind, buf);
    return buf;
  }
  const size_t nd = t.shape.size();
  int64_t idx[64];
  int64_t rem = start;
  for (size_t d = nd; d-- > 0;) {
    idx[d] = rem % t.shape[d];
    rem /= t.shape[d];
  }
  int64_t done = 0;
  while (done < n) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * t.strides[d];
    const int64_t run = std::min(t.shape[nd - 1] - idx[nd - 1], n - done);
    convert_run<F>(t.data + off * item, t.strides[nd - 1] * item, run, t.kind, buf + done);
    done += run;
    idx[nd - 1] += run;
    for (size_t d = nd - 1; d > 0 && idx[d] == t.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
  return buf;
}

template const float *load_block<float>(const TensorRef &, int64_t, int64_t, float *);
template const double *load_block<double>(const TensorRef &, int64_t, int64_t, double *);

}  // namespace debugtune
