// Copies of CPU tensors into preallocated buffers on one native thread (GIL released): the probe's
// parameter snapshot before an optimizer step. Identical dense layouts are one copy of the spanned
// bytes (large ones with non-temporal stores on x86-64: the snapshot is read again only after the next
// optimizer step, so it should neither evict the training's working set nor cost a read-for-ownership
// of every destination line); anything else is copied element by element through the strides.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace debugtune {

namespace nb = nanobind;

namespace {

using Src = nb::ndarray<nb::ro, nb::device::cpu>;
using Dst = nb::ndarray<nb::device::cpu>;

struct Layout {
  const uint8_t *src;
  uint8_t *dst;
  size_t item;
  std::vector<int64_t> shape, sstride, dstride;
};

// Elements spanned by a layout with non-negative strides (0 when a stride is negative).
int64_t span(const std::vector<int64_t> &shape, const std::vector<int64_t> &stride) {
  int64_t s = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (stride[d] < 0) return 0;
    s += (shape[d] - 1) * stride[d];
  }
  return s;
}

constexpr size_t STREAM_MIN = size_t(1) << 20;  // bytes from which a dense copy streams past the caches

// memcpy, with non-temporal stores for large copies on x86-64 (SSE2, the baseline).
void dense_copy(uint8_t *d, const uint8_t *s, size_t n) {
#if defined(__x86_64__)
  if (n >= STREAM_MIN) {
    size_t i = 0;
    const size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    std::memcpy(d, s, head);
    for (i = head; i + 64 <= n; i += 64) {
      __builtin_prefetch(s + i + 4096);
      const __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
      const __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_stream_si128((__m128i *)(d + i), a);
      _mm_stream_si128((__m128i *)(d + i + 16), b);
      _mm_stream_si128((__m128i *)(d + i + 32), c);
      _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    std::memcpy(d + i, s + i, n - i);
    _mm_sfence();  // streamed stores are visible before the reader thread is started
    return;
  }
#endif
  std::memcpy(d, s, n);
}

void copy_strided(const Layout &l, size_t dim, const uint8_t *s, uint8_t *d) {
  const int64_t n = l.shape[dim];
  const int64_t ss = l.sstride[dim] * (int64_t)l.item, ds = l.dstride[dim] * (int64_t)l.item;
  if (dim + 1 == l.shape.size()) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, l.item);
    return;
  }
  for (int64_t i = 0; i < n; ++i) copy_strided(l, dim + 1, s + i * ss, d + i * ds);
}

void copy_one(const Layout &l) {
  int64_t numel = 1;
  for (auto e : l.shape) numel *= e;
  if (numel == 0) return;
  if (l.sstride == l.dstride && span(l.shape, l.sstride) == numel) {
    dense_copy(l.dst, l.src, (size_t)numel * l.item);
    return;
  }
  if (l.shape.empty()) {
    std::memcpy(l.dst, l.src, l.item);
    return;
  }
  copy_strided(l, 0, l.src, l.dst);
}

void copy_into(std::vector<Dst> dst, const std::vector<Src> &src) {
  if (dst.size() != src.size()) throw nb::value_error("copy_into: as many destinations as sources are needed");
  std::vector<Layout> work;
  for (size_t k = 0; k < src.size(); ++k) {
    const Src &s = src[k];
    const Dst &d = dst[k];
    bool same = s.ndim() == d.ndim() && s.dtype() == d.dtype();
    for (size_t i = 0; same && i < s.ndim(); ++i) same = s.shape(i) == d.shape(i);
    if (!same) throw nb::value_error(("copy_into: pair " + std::to_string(k) + " differs in shape or dtype").c_str());
    Layout l{(const uint8_t *)s.data(), (uint8_t *)d.data(), s.itemsize(), {}, {}, {}};
    for (size_t i = 0; i < s.ndim(); ++i) {
      l.shape.push_back((int64_t)s.shape(i));
      l.sstride.push_back(s.stride(i));
      l.dstride.push_back(d.stride(i));
    }
    work.push_back(std::move(l));
  }
  nb::gil_scoped_release release;
  for (const auto &l : work) copy_one(l);
}

}  // namespace

void register_copy(nb::module_ &m) {
  m.def("copy_into", &copy_into, nb::arg("dst"), nb::arg("src"),
        "Copy each source tensor into the destination of the same shape and dtype (GIL released).");
}

}  // namespace debugtune
