#pragma once
//! The prefetch stage: a background thread that runs ahead of the consumer.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <strata/data/detail/node.hpp>
#include <strata/data/element.hpp>

namespace strata::data::detail {

template <DatasetElement E>
class PrefetchStream final : public Stream<E> {
 public:
  PrefetchStream(StreamPtr<E> up, std::size_t capacity) : up_(std::move(up)), capacity_(capacity) {
    thread_ = std::thread([this] { produce(); });
  }
  ~PrefetchStream() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    thread_.join();
  }
  PrefetchStream(const PrefetchStream&) = delete;
  PrefetchStream& operator=(const PrefetchStream&) = delete;

  std::optional<E> next() override {
    std::unique_lock lk(mu_);
    not_empty_.wait(lk, [&] { return !queue_.empty() || done_; });
    if (!queue_.empty()) {
      std::optional<E> out(std::move(queue_.front()));
      queue_.pop_front();
      lk.unlock();
      not_full_.notify_one();
      return out;
    }
    // The producer's failure arrives in order, after the elements it made
    // before failing; once delivered the pass is over.
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return std::nullopt;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock lk(mu_);
        // Wait for room before producing, so at most `capacity_` elements
        // are ever made ahead of the consumer.
        not_full_.wait(lk, [&] { return stop_ || queue_.size() < capacity_; });
        if (stop_) return;
      }
      std::optional<E> x;
      std::exception_ptr err;
      try {
        x = up_->next();
      } catch (...) {
        err = std::current_exception();
      }
      bool more = false;
      {
        std::lock_guard lk(mu_);
        if (stop_) return;
        if (x) {
          try {
            queue_.push_back(std::move(*x));
            more = true;
          } catch (...) {
            err = std::current_exception();
          }
        }
        if (!more) {
          // moved, not copied: the consumer then holds the only reference, so
          // the exception is never released on this thread while the consumer
          // handles it (libstdc++'s reference count is invisible to TSan)
          error_ = std::move(err);
          done_ = true;
        }
      }
      not_empty_.notify_one();
      if (!more) return;
    }
  }

  StreamPtr<E> up_;  // used by the producer thread only, until it is joined
  std::size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<E> queue_;
  std::exception_ptr error_;
  bool done_ = false, stop_ = false;
  std::thread thread_;  // last: started after every member it uses exists
};

template <DatasetElement E>
class PrefetchNode final : public Node<E> {
 public:
  PrefetchNode(NodePtr<E> up, std::size_t n) : up_(std::move(up)), n_(n) {}
  StreamPtr<E> open() const override { return std::make_unique<PrefetchStream<E>>(up_->open(), n_); }
  Cardinality cardinality() const override { return up_->cardinality(); }
  NodePtr<E> shard_files(std::size_t num, std::size_t index) const override {
    auto up = up_->shard_files(num, index);
    return up ? std::make_shared<const PrefetchNode>(std::move(up), n_) : nullptr;
  }

 void pass_counters(std::vector<std::uint64_t>& out) const override { up_->pass_counters(out); }
  void set_pass_counters(std::span<const std::uint64_t> in, std::size_t& at) const override {
    up_->set_pass_counters(in, at);
  }

  private:
  NodePtr<E> up_;
  std::size_t n_;
};

}  // namespace strata::data::detail
