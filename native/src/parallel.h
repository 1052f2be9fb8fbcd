// Deterministic fork-join over numbered work items: each thread takes one contiguous range, the caller
// merges per-item results in item order, so results never depend on the number of threads.
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace debugtune {

// Threads to use for `work` elements: `requested` if > 0, else one per `per_thread` elements up to the
// hardware concurrency.
inline int pick_threads(int requested, int64_t work, int64_t per_thread) {
  if (requested > 0) return requested;
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  return (int)std::max<int64_t>(1, std::min<int64_t>(hw, work / std::max<int64_t>(1, per_thread)));
}

// Calls fn(i) for i in [0, items) on `threads` threads (the caller is one of them). Rethrows the first
// exception after all threads joined.
template <typename Fn> void parallel_items(int64_t items, int threads, Fn &&fn) {
  threads = (int)std::max<int64_t>(1, std::min<int64_t>(threads, items));
  if (threads <= 1) {
    for (int64_t i = 0; i < items; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(threads);
  auto range = [&](int k) {
    try {
      const int64_t lo = items * k / threads, hi = items * (k + 1) / threads;
      for (int64_t i = lo; i < hi; ++i) fn(i);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int k = 1; k < threads; ++k) pool.emplace_back(range, k);
  range(0);
  for (auto &th : pool) th.join();
  for (auto &e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace debugtune
