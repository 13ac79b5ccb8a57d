// Lockstep threads: a step of work split over T threads, the caller's thread one of them, every step
// started and finished together (a board of chips ticks each chip's share of a clock cycle on a thread).
//
// A step is short (a few microseconds of Verilator's evaluation a chip), so the threads do not sleep between
// steps: each spins on the step counter for a while and only then blocks on it (C++20's atomic wait, a futex),
// which keeps a step's start and end within a cache-line transfer when every thread has a core, and costs
// nothing but the spin when they share cores with others.  What a step reads, the caller wrote before
// run() (release on the counter, acquire in each thread); what each thread wrote, the caller sees after run().

#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace dx1 {

class Lockstep {
  public:
    // `work(t)` is thread t's share of a step, t = 0 (the caller's) .. threads - 1.
    Lockstep(int threads, std::function<void(int)> work) : work_(std::move(work)) {
        for (int t = 1; t < threads; ++t) threads_.emplace_back([this, t] { follow(t); });
    }

    ~Lockstep() {
        quit_.store(true, std::memory_order_relaxed);
        step_.fetch_add(1, std::memory_order_release);
        step_.notify_all();
        for (std::thread& thread : threads_) thread.join();
    }

    Lockstep(const Lockstep&) = delete;
    Lockstep& operator=(const Lockstep&) = delete;

    int threads() const { return int(threads_.size()) + 1; }

    // One step: every thread's share, this thread's among them; returns when all are done.
    void run() {
        if (threads_.empty()) {
            work_(0);
            return;
        }
        done_.store(0, std::memory_order_relaxed);
        step_.fetch_add(1, std::memory_order_release);
        step_.notify_all();
        work_(0);
        const int others = int(threads_.size());
        await(done_, [others](int value) { return value == others; });
    }

  private:
    // Spins this many rounds on a counter before blocking on it.
    static constexpr int kSpins = 4000;

    // The counter's value once `pred` holds for it: spinning at first, then blocking until it changes.
    template <typename T, typename Pred>
    static T await(std::atomic<T>& counter, Pred pred) {
        for (int i = 0;; ++i) {
            T value = counter.load(std::memory_order_acquire);
            if (pred(value)) return value;
            if (i >= kSpins) {
                counter.wait(value, std::memory_order_acquire);
            } else {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#else
                std::this_thread::yield();
#endif
            }
        }
    }

    void follow(int t) {
        uint64_t seen = 0;
        while (true) {
            seen = await(step_, [seen](uint64_t value) { return value != seen; });
            if (quit_.load(std::memory_order_relaxed)) return;
            work_(t);
            done_.fetch_add(1, std::memory_order_acq_rel);
            done_.notify_one();
        }
    }

    std::function<void(int)> work_;
    std::vector<std::thread> threads_;
    std::atomic<uint64_t> step_{0};
    std::atomic<int> done_{0};
    std::atomic<bool> quit_{false};
};

}  // namespace dx1
