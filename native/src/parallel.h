// Numbered work items claimed one at a time by whoever is there: helper threads started for them and the
// thread that waits for the result. Results go into per-item slots that the caller merges in item order, so
// they never depend on how many threads took part or which thread did which item.
//
// A waiter never waits for a helper the scheduler has not run yet: it takes the unclaimed items itself and
// then waits only for the items already in progress. On a loaded machine a background computation thus
// costs at most its own work on the waiting thread, never a scheduler time slice. Helpers are detached and
// keep the pool alive through a shared_ptr; once every item is finished they touch nothing but the pool.
//
// Background helpers (Priority::Idle) run under Linux's SCHED_IDLE policy: they use a core only when it has
// nothing else to run, so they never preempt the training thread that started them (or anyone else's). On an
// idle core they run at once; with no idle core the waiter does the work itself when it needs the result.
// Elsewhere, or if the policy is refused, they run at normal priority.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace debugtune {

// Threads to use for `work` elements: `requested` if > 0, else one per `per_thread` elements up to the
// hardware concurrency.
inline int pick_threads(int requested, int64_t work, int64_t per_thread) {
  if (requested > 0) return requested;
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  return (int)std::max<int64_t>(1, std::min<int64_t>(hw, work / std::max<int64_t>(1, per_thread)));
}

class ItemPool {
 public:
  // fn(i) for every i in [0, items); fn must only touch state that outlives the pool or is owned by it.
  ItemPool(int64_t items, std::function<void(int64_t)> fn) : items_(items), fn_(std::move(fn)) {}

  // Claims and runs items until none is left unclaimed. Never throws (the first error is kept).
  void work() {
    for (int64_t i; (i = next_.fetch_add(1)) < items_;) {
      try {
        fn_(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (++finished_ == items_) done_.notify_all();
    }
  }

  // work(), then blocks until every item is finished; rethrows the first error.
  void wait() {
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return finished_ >= items_; });
    if (error_) std::rethrow_exception(error_);
  }

  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_ >= items_;
  }

  enum class Priority { Normal, Idle };

  // Starts `threads` detached helpers working on the pool (none for threads <= 0).
  static void start_helpers(const std::shared_ptr<ItemPool> &pool, int threads, Priority priority) {
    threads = (int)std::min<int64_t>(threads, pool->items_);
    for (int k = 0; k < threads; ++k)
      std::thread([pool, priority] {
        if (priority == Priority::Idle) lower_priority();
        pool->work();
      }).detach();
  }

 private:
  // The calling thread to SCHED_IDLE (Linux; glibc refuses the policy as a creation attribute, so each helper
  // sets it first thing: a new thread starts with CFS's start debit, so it does not preempt its creator before).
  static void lower_priority() {
#if defined(__linux__) && defined(SCHED_IDLE)
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);  // best effort: normal priority if refused
#endif
  }

  const int64_t items_;
  std::function<void(int64_t)> fn_;
  std::atomic<int64_t> next_{0};
  int64_t finished_ = 0;  // guarded by mu_
  std::exception_ptr error_;
  std::mutex mu_;
  std::condition_variable done_;
};

}  // namespace debugtune
