// Work shared over XLA's intra-op thread pool by the kernels of this directory.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace pytest_reward {

// The shared state of one parallel_for; helpers scheduled on the pool hold it by shared_ptr, so one that starts
// after the call returned finds no item left and touches nothing of the caller's.
struct ParallelState {
  std::function<std::function<void(int64_t)>()> make_worker;
  int64_t items = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable finished;
};

inline void parallel_work(ParallelState &s) {
  int64_t i = s.next.fetch_add(1);
  if (i >= s.items) return;
  const std::function<void(int64_t)> body = s.make_worker();  // made only by a thread that has an item
  int64_t mine = 0;
  for (; i < s.items; ++mine, i = s.next.fetch_add(1)) body(i);
  if (s.done.fetch_add(mine) + mine == s.items) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.finished.notify_all();
  }
}

// Calls make_worker() once in each thread that takes part and the worker it returns on each item of [0, items)
// (one thread per item, items handed out in increasing order), on at most max_threads threads of the pool,
// this one included; returns when every item is done. A worker owns its scratch memory.
inline void parallel_for(xla::ffi::ThreadPool &pool, int64_t items, int64_t max_threads,
                         std::function<std::function<void(int64_t)>()> make_worker) {
  if (items <= 0) return;
  auto state = std::make_shared<ParallelState>();
  state->make_worker = std::move(make_worker);
  state->items = items;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>({pool.num_threads(), max_threads, items}));
  for (int64_t t = 1; t < threads; ++t) pool.Schedule([state] { parallel_work(*state); });
  parallel_work(*state);  // this thread takes items too, so the call finishes even if no helper ever runs
  std::unique_lock<std::mutex> lock(state->mu);
  state->finished.wait(lock, [&] { return state->done.load() == state->items; });
}

}  // namespace pytest_reward
