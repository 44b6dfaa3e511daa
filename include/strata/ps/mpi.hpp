#pragma once
//! The parameter server over MPI: ranks are the chief, servers and workers of
//! a ClusterSpec. The chief runs the program's training loop; a coordinator
//! thread of its own hands each step (the batch itself) to an idle worker
//! that the staleness bound lets start, collects results, reschedules a
//! failed worker's step on another, and (staleness 0) tells the servers to
//! apply each completed round. Workers pull their parameters from every
//! server, compute, push gradients; servers apply them (optimizer state lives
//! there) one request at a time each, all servers in parallel. Every wait is
//! bounded by the options' timeout and raises CollectiveTimeout naming who
//! did not answer. A worker process that dies cannot be survived here: Open
//! MPI ends the whole job (it has no fault tolerance without ULFM).
//!   strata::MpiParameterServers rt{strata::ClusterSpec::from_counts(1, world_size), {.staleness = 1}};
//!   strata::ParameterServerStrategy s{rt};   // then the same model code as in one process

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <optional>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/runtime.hpp>
#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/ps/shard_store.hpp>

namespace strata {

class MpiParameterServers final : public ParameterServerRuntime {
 public:
  //! This process's part in `spec` (of MPI_COMM_WORLD). `o.workers` and
  //! `o.servers` are taken from the spec.
  MpiParameterServers(ClusterSpec spec, ParameterServerOptions o) : spec_(std::move(spec)), o_(std::move(o)) {
    (void)detail::mpi::runtime();
    detail::mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    int size = 0;
    MPI_Comm_size(comm_, &size);
    spec_.validate(size);
    o_.workers = static_cast<int>(spec_.workers.size());
    o_.servers = static_cast<int>(spec_.servers.size());
    const auto r = spec_.role_of(rank_);
    role_ = r == ClusterSpec::Role::Chief ? Role::Chief : r == ClusterSpec::Role::Server ? Role::Server : Role::Worker;
  }
  MpiParameterServers(const MpiParameterServers&) = delete;
  MpiParameterServers& operator=(const MpiParameterServers&) = delete;
  ~MpiParameterServers() override {
    stop_progress();
    MPI_Comm_free(&comm_);
  }

  [[nodiscard]] Role role() const noexcept override { return role_; }
  [[nodiscard]] int num_workers() const noexcept override { return o_.workers; }
  [[nodiscard]] int num_servers() const noexcept override { return o_.servers; }
  [[nodiscard]] std::optional<std::uint64_t> staleness() const noexcept override { return o_.staleness; }
  [[nodiscard]] const ClusterSpec& cluster() const noexcept { return spec_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! The most steps a step started ahead of the slowest live worker (chief).
  [[nodiscard]] std::uint64_t max_observed_gap() const noexcept { return max_gap_.load(); }

  void create_variables(const std::vector<Shape>& shapes, const Tensor<float>& init, ServerUpdate update) override {
    Tensor<float> flat = detail::flat_value(shapes, init);
    const auto layout = detail::shard_layout(shapes, o_.partitioner, o_.servers);
    by_server_.assign(static_cast<std::size_t>(o_.servers), {});
    for (std::size_t i = 0; i < layout.size(); ++i) by_server_[i % by_server_.size()].push_back(i);
    shards_ = layout;
    value_ = flat;
    update_ = std::move(update);
    if (role_ == Role::Server) store_ = std::make_unique<ShardStore<float>>(std::move(flat), layout, o_.servers);
  }

  void pull(int, std::span<float> params) override {
    check_size(params.size(), "pull");
    std::vector<std::vector<float>> bufs(by_server_.size());
    std::vector<MPI_Request> reqs;
    for (std::size_t s = 0; s < by_server_.size(); ++s) {
      bufs[s].resize(count_of(s));
      reqs.push_back(irecv(bufs[s].data(), bufs[s].size(), server_rank(s), kPullReply));
    }
    for (std::size_t s = 0; s < by_server_.size(); ++s) send(nullptr, 0, server_rank(s), kPull);
    wait_all(reqs, "a pull from the servers");
    for (std::size_t s = 0; s < by_server_.size(); ++s) scatter(s, bufs[s], params);
  }
  void push(int, std::span<const float> grad) override {
    check_size(grad.size(), "push");
    std::vector<std::vector<float>> bufs(by_server_.size());
    std::vector<MPI_Request> reqs;
    std::vector<char> acks(by_server_.size());
    for (std::size_t s = 0; s < by_server_.size(); ++s) reqs.push_back(irecv(&acks[s], 0, server_rank(s), kAck));
    for (std::size_t s = 0; s < by_server_.size(); ++s) {
      bufs[s] = gather(s, grad);
      reqs.push_back(isend(bufs[s].data(), bufs[s].size(), server_rank(s), kPush));
    }
    wait_all(reqs, "a push to the servers");
  }
  void read(std::span<float> out) override {
    check_size(out.size(), "read");
    std::copy(value_.begin(), value_.end(), out.begin());
  }
  void assign(std::span<const float> in) override {
    check_size(in.size(), "assign");
    std::copy(in.begin(), in.end(), value_.begin());  // reaches the servers when training starts
  }

  void set_step(std::function<StepOutput(int, const StepInput&)> fn) override { step_ = std::move(fn); }

  RemoteValue<StepOutput> schedule(StepInput in) override {
    if (role_ != Role::Chief) throw Error("ParameterServerStrategy::schedule: only the chief schedules steps");
    auto state = std::make_shared<detail::RemoteState<StepOutput>>();
    std::unique_lock lk(mu_);
    if (fatal_) std::rethrow_exception(fatal_);
    if (live_count() == 0) throw Error("ParameterServerStrategy::schedule: every worker has failed");
    cv_.wait(lk, [&] { return queue_.size() < 2 * static_cast<std::size_t>(o_.workers) || fatal_ || !running_; });
    Task t{std::move(in), state, next_id_++, 0};
    const std::uint64_t id = t.id;
    queue_.push_back(std::move(t));
    ++pending_;
    if (!running_) start_progress();
    return RemoteValue<StepOutput>(std::move(state), id);
  }

  void join() override {
    if (role_ != Role::Chief) return;
    stop_progress();  // drains the queue first
    std::lock_guard lk(mu_);
    rethrow_once();
  }

  void serve(std::span<float> final_value) override {
    if (role_ == Role::Chief) return;
    if (role_ == Role::Server) serve_as_server(final_value);
    else serve_as_worker(final_value);
  }
  void end_training(std::span<const float> final_value) override {
    if (role_ != Role::Chief) return;
    stop_progress();
    std::vector<float> v(final_value.begin(), final_value.end());
    std::vector<MPI_Request> reqs;
    for (int r = 0; r < static_cast<int>(spec_.servers.size() + spec_.workers.size() + 1); ++r)
      if (r != rank_) reqs.push_back(isend(v.data(), v.size(), r, kEnd));
    wait_all(reqs, "the end of training sent to every rank");
  }

  [[nodiscard]] std::vector<WorkerFailure> failures() const override {
    std::lock_guard lk(mu_);
    return failures_;
  }
  [[nodiscard]] std::vector<std::uint64_t> pushes_per_server() const override { return counts(0); }
  [[nodiscard]] std::vector<std::uint64_t> pulls_per_server() const override { return counts(1); }

 private:
  enum Tag : int { kAssign = 7101, kPull, kPullReply, kPush, kAck, kApply, kDrop, kRead, kReadReply, kStep, kStepX,
                   kStepY, kResult, kFailed, kEnd };
  struct Task {
    StepInput in;
    std::shared_ptr<detail::RemoteState<StepOutput>> state;
    std::uint64_t id = 0;
    int attempts = 0;
  };

  // --- messages -------------------------------------------------------------
  MPI_Request irecv(void* buf, std::size_t n, int src, int tag, MPI_Datatype t = MPI_FLOAT) {
    MPI_Request r;
    detail::mpi::check(MPI_Irecv(buf, detail::mpi::as_count(n, "a parameter-server message"), t, src, tag, comm_, &r), "MPI_Irecv");
    return r;
  }
  MPI_Request isend(const void* buf, std::size_t n, int dst, int tag, MPI_Datatype t = MPI_FLOAT) {
    MPI_Request r;
    detail::mpi::check(MPI_Isend(buf, detail::mpi::as_count(n, "a parameter-server message"), t, dst, tag, comm_, &r), "MPI_Isend");
    return r;
  }
  void send(const void* buf, std::size_t n, int dst, int tag, MPI_Datatype t = MPI_FLOAT) {
    MPI_Request r = isend(buf, n, dst, tag, t);
    std::vector<MPI_Request> v{r};
    wait_all(v, "a message to rank " + std::to_string(dst));
  }
  //! Waits for every request, at most the timeout.
  void wait_all(std::vector<MPI_Request>& reqs, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + o_.timeout;
    for (int spins = 0;; ++spins) {
      int done = 0;
      detail::mpi::check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        detail::mpi::runtime().note_failure(o_.timeout);
        throw CollectiveTimeout("strata: rank " + std::to_string(rank_) + " waited " + std::to_string(o_.timeout.count()) +
                                " ms for " + what);
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  //! Waits for a message with one of `tags` from `src` (any: MPI_ANY_SOURCE), at most the timeout.
  MPI_Status probe(int src, std::initializer_list<int> tags, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + o_.timeout;
    for (int spins = 0;; ++spins) {
      for (int tag : tags) {
        int flag = 0;
        MPI_Status st;
        detail::mpi::check(MPI_Iprobe(src, tag, comm_, &flag, &st), "MPI_Iprobe");
        if (flag) return st;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        detail::mpi::runtime().note_failure(o_.timeout);
        throw CollectiveTimeout("strata: rank " + std::to_string(rank_) + " (" + role_name() + ") waited " +
                                std::to_string(o_.timeout.count()) + " ms for " + what);
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  template <class T>
  std::vector<T> recv_all(const MPI_Status& st, MPI_Datatype t) {
    int n = 0;
    MPI_Get_count(&st, t, &n);
    std::vector<T> v(static_cast<std::size_t>(n));
    detail::mpi::check(MPI_Recv(v.data(), n, t, st.MPI_SOURCE, st.MPI_TAG, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    return v;
  }

  // --- layout -----------------------------------------------------------------
  [[nodiscard]] int server_rank(std::size_t s) const { return spec_.servers[s]; }
  [[nodiscard]] std::size_t count_of(std::size_t s) const {
    std::size_t n = 0;
    for (std::size_t i : by_server_[s]) n += shards_[i].size();
    return n;
  }
  std::vector<float> gather(std::size_t s, std::span<const float> all) const {
    std::vector<float> out;
    out.reserve(count_of(s));
    for (std::size_t i : by_server_[s]) out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(shards_[i].begin),
                                                   all.begin() + static_cast<std::ptrdiff_t>(shards_[i].end));
    return out;
  }
  void scatter(std::size_t s, const std::vector<float>& in, std::span<float> all) const {
    std::size_t at = 0;
    for (std::size_t i : by_server_[s]) {
      std::copy_n(in.data() + at, shards_[i].size(), all.data() + shards_[i].begin);
      at += shards_[i].size();
    }
  }
  void check_size(std::size_t got, const char* what) const {
    if (got != value_.size())
      throw ShapeError(std::string("ParameterServerStrategy::") + what + ": the variables hold " +
                       std::to_string(value_.size()) + " elements (created on every rank?), the buffer " +
                       std::to_string(got));
  }
  [[nodiscard]] std::string role_name() const {
    return role_ == Role::Chief ? "chief" : role_ == Role::Server ? "server" : "worker";
  }

  // --- servers ----------------------------------------------------------------
  void serve_as_server(std::span<float> final_value) {
    if (!store_) throw Error("ParameterServerStrategy: a server has no variables; build the model on every rank");
    const std::size_t me = static_cast<std::size_t>(spec_.server_index(rank_));
    const bool sync = o_.staleness == std::uint64_t{0};
    for (;;) {
      const MPI_Status st = probe(MPI_ANY_SOURCE, {kPull, kPush, kApply, kDrop, kAssign, kRead, kEnd}, "requests");
      const int src = st.MPI_SOURCE;
      switch (st.MPI_TAG) {
        case kPull: {
          (void)recv_all<float>(st, MPI_FLOAT);
          std::vector<float> out(count_of(me));
          std::size_t at = 0;
          for (std::size_t i : by_server_[me]) {
            store_->pull(i, std::span<float>(out).subspan(at, shards_[i].size()));
            at += shards_[i].size();
          }
          send(out.data(), out.size(), src, kPullReply);
          break;
        }
        case kPush: {
          const auto g = recv_all<float>(st, MPI_FLOAT);
          if (g.size() != count_of(me)) throw ShapeError("ParameterServerStrategy: server got a push of the wrong size");
          const int w = spec_.worker_index(src);
          std::size_t at = 0;
          for (std::size_t i : by_server_[me]) {
            const auto part = std::span<const float>(g).subspan(at, shards_[i].size());
            if (sync) store_->stage(i, w, part);
            else store_->push(i, part, update_);
            at += shards_[i].size();
          }
          send(nullptr, 0, src, kAck);
          break;
        }
        case kApply:
          (void)recv_all<float>(st, MPI_FLOAT);
          store_->apply_staged(update_);
          send(nullptr, 0, src, kAck);
          break;
        case kDrop: {
          const auto w = recv_all<int>(st, MPI_INT);
          if (!w.empty()) store_->drop_staged(w[0]);
          send(nullptr, 0, src, kAck);
          break;
        }
        case kAssign: {
          const auto v = recv_all<float>(st, MPI_FLOAT);
          store_->assign(v);
          send(nullptr, 0, src, kAck);
          break;
        }
        case kRead: {
          (void)recv_all<float>(st, MPI_FLOAT);
          const std::vector<float> all(store_->unsynchronized_value().begin(), store_->unsynchronized_value().end());
          const auto mine = gather(me, all);
          send(mine.data(), mine.size(), src, kReadReply);
          break;
        }
        case kEnd: {
          const auto v = recv_all<float>(st, MPI_FLOAT);
          std::copy_n(v.data(), std::min(v.size(), final_value.size()), final_value.data());
          return;
        }
        default: break;
      }
    }
  }

  // --- workers ----------------------------------------------------------------
  void serve_as_worker(std::span<float> final_value) {
    const int w = spec_.worker_index(rank_);
    for (;;) {
      const MPI_Status st = probe(spec_.chief, {kStep, kEnd}, "the chief's next step");
      if (st.MPI_TAG == kEnd) {
        const auto v = recv_all<float>(st, MPI_FLOAT);
        std::copy_n(v.data(), std::min(v.size(), final_value.size()), final_value.data());
        return;
      }
      // header: step id, iteration, worker clock, attempt, x rank, x dims..., y rank, y dims...
      const auto h = recv_all<std::int64_t>(st, MPI_INT64_T);
      std::size_t at = 4;
      const auto shape = [&] {
        const auto r = static_cast<std::size_t>(h.at(at++));
        std::vector<std::size_t> d;
        for (std::size_t k = 0; k < r; ++k) d.push_back(static_cast<std::size_t>(h.at(at++)));
        return Shape(d);
      };
      StepInput in;
      in.iteration = h[1];
      const Shape xs = shape(), ys = shape();
      in.x = Tensor<float>(xs);
      in.y = Tensor<float>(ys);
      std::vector<MPI_Request> reqs{irecv(in.x.data(), in.x.size(), spec_.chief, kStepX),
                                    irecv(in.y.data(), in.y.size(), spec_.chief, kStepY)};
      wait_all(reqs, "a step's batch from the chief");
      const auto id = static_cast<std::uint64_t>(h[0]);
      try {
        if (!step_) throw Error("ParameterServerStrategy: this worker has no step function (fit on every rank)");
        if (o_.before_step) o_.before_step(WorkerContext{w, id, static_cast<std::uint64_t>(h[2]), static_cast<int>(h[3])});
        const StepOutput out = step_(w, in);
        std::vector<double> r{static_cast<double>(id), static_cast<double>(out.rows), out.loss};
        r.insert(r.end(), out.metrics.begin(), out.metrics.end());
        send(r.data(), r.size(), spec_.chief, kResult, MPI_DOUBLE);
      } catch (const CollectiveTimeout&) {
        throw;  // a server did not answer: not a failure of this step alone
      } catch (const std::exception& e) {
        const std::string msg = std::to_string(id) + "\n" + e.what();
        send(msg.data(), msg.size(), spec_.chief, kFailed, MPI_CHAR);
      }
    }
  }

  // --- the chief's coordinator --------------------------------------------------
  void start_progress() {  // with mu_ held
    if (thread_.joinable()) thread_.join();  // a run that ended by itself (it no longer takes mu_)
    running_ = true;
    closing_ = false;
    if (clock_.empty()) {
      clock_.assign(spec_.workers.size(), 0);
      live_.assign(spec_.workers.size(), true);
      busy_.assign(spec_.workers.size(), std::nullopt);
      sent_at_.assign(spec_.workers.size(), {});
    }
    thread_ = std::thread([this] { progress(); });
  }
  void stop_progress() {
    std::thread t;
    {
      std::lock_guard lk(mu_);
      closing_ = true;
      t = std::move(thread_);
    }
    cv_.notify_all();
    if (t.joinable()) t.join();
  }
  void rethrow_once() {  // with mu_ held
    if (fatal_) std::rethrow_exception(std::exchange(fatal_, nullptr));
    if (lost_) std::rethrow_exception(std::exchange(lost_, nullptr));
  }
  [[nodiscard]] int live_count() const {
    int n = 0;
    for (bool l : live_) n += l;
    return clock_.empty() ? o_.workers : n;
  }
  [[nodiscard]] std::uint64_t slowest() const {
    std::uint64_t m = UINT64_MAX;
    for (std::size_t w = 0; w < clock_.size(); ++w)
      if (live_[w]) m = std::min(m, clock_[w]);
    return m;
  }
  //! The chief tells every server something and waits for each one's ack.
  void tell_servers(int tag, const void* data, std::size_t n, MPI_Datatype t) {
    std::vector<char> acks(spec_.servers.size());
    std::vector<MPI_Request> reqs;
    for (std::size_t s = 0; s < spec_.servers.size(); ++s) reqs.push_back(irecv(&acks[s], 0, server_rank(s), kAck, MPI_CHAR));
    for (std::size_t s = 0; s < spec_.servers.size(); ++s) reqs.push_back(isend(data, n, server_rank(s), tag, t));
    wait_all(reqs, "the servers' acknowledgement");
  }
  void send_step(std::size_t w, const Task& t) {
    std::vector<std::int64_t> h{static_cast<std::int64_t>(t.id), t.in.iteration, static_cast<std::int64_t>(clock_[w]),
                                t.attempts};
    for (const Tensor<float>* x : {&t.in.x, &t.in.y}) {
      h.push_back(static_cast<std::int64_t>(x->shape().rank()));
      for (auto d : x->shape().dims()) h.push_back(static_cast<std::int64_t>(d));
    }
    const int dst = spec_.workers[w];
    std::vector<MPI_Request> reqs{isend(h.data(), h.size(), dst, kStep, MPI_INT64_T),
                                  isend(t.in.x.data(), t.in.x.size(), dst, kStepX),
                                  isend(t.in.y.data(), t.in.y.size(), dst, kStepY)};
    wait_all(reqs, "worker rank " + std::to_string(dst) + " to take step " + std::to_string(t.id));
  }

  void progress() {
    try {
      tell_servers(kAssign, value_.data(), value_.size(), MPI_FLOAT);  // the chief's value is the truth between runs
      const bool sync = o_.staleness == std::uint64_t{0};
      std::uint64_t applied = slowest();
      for (int idle = 0;; ++idle) {
        bool acted = false;
        {  // dispatch to idle live workers the bound lets start, lowest index first
          std::unique_lock lk(mu_);
          for (std::size_t w = 0; w < clock_.size() && !queue_.empty(); ++w) {
            if (!live_[w] || busy_[w]) continue;
            const std::uint64_t slow = slowest();
            if (o_.staleness && clock_[w] > slow + *o_.staleness) continue;
            Task t = std::move(queue_.front());
            queue_.pop_front();
            cv_.notify_all();
            max_gap_ = std::max(max_gap_.load(), clock_[w] - slow);
            lk.unlock();
            send_step(w, t);
            lk.lock();
            sent_at_[w] = std::chrono::steady_clock::now();
            busy_[w] = std::move(t);
            acted = true;
          }
          bool any_busy = false;
          for (const auto& b : busy_) any_busy = any_busy || b.has_value();
          if (closing_ && queue_.empty() && !any_busy) break;
          if (live_count() == 0) throw Error("strata: every worker has failed; " + detail::describe_failures(failures_));
        }
        int flag = 0;
        MPI_Status st;
        detail::mpi::check(MPI_Iprobe(MPI_ANY_SOURCE, kResult, comm_, &flag, &st), "MPI_Iprobe");
        if (!flag) detail::mpi::check(MPI_Iprobe(MPI_ANY_SOURCE, kFailed, comm_, &flag, &st), "MPI_Iprobe");
        if (flag) {
          acted = true;
          const auto w = static_cast<std::size_t>(spec_.worker_index(st.MPI_SOURCE));
          if (st.MPI_TAG == kResult) {
            const auto r = recv_all<double>(st, MPI_DOUBLE);
            StepOutput out;
            out.rows = static_cast<std::size_t>(r.at(1));
            out.loss = r.at(2);
            out.metrics.assign(r.begin() + 3, r.end());
            std::unique_lock lk(mu_);
            auto t = std::move(*busy_[w]);
            busy_[w].reset();
            ++clock_[w];
            --pending_;
            lk.unlock();
            t.state->finish(std::move(out), nullptr);
          } else {
            const auto m = recv_all<char>(st, MPI_CHAR);
            const std::string msg(m.begin(), m.end());
            const WorkerFailure f{static_cast<int>(w), busy_[w] ? busy_[w]->id : 0, msg.substr(msg.find('\n') + 1)};
            if (o_.on_failure) o_.on_failure(f);
            else std::fprintf(stderr, "strata: worker %d (rank %d) failed step %llu (rescheduling it): %s\n", f.worker,
                              st.MPI_SOURCE, static_cast<unsigned long long>(f.step), f.what.c_str());
            if (sync) {
              const int wi = static_cast<int>(w);
              tell_servers(kDrop, &wi, 1, MPI_INT);
            }
            std::lock_guard lk(mu_);
            failures_.push_back(f);
            live_[w] = false;
            Task t = std::move(*busy_[w]);
            busy_[w].reset();
            ++t.attempts;
            if (auto err = detail::give_up(t.id, t.attempts, o_.max_attempts, o_.workers, live_count(), failures_); !err) {
              queue_.push_front(std::move(t));
            } else {
              if (!lost_) lost_ = err;
              t.state->finish(std::nullopt, err);
              --pending_;
            }
            cv_.notify_all();
          }
        }
        if (sync) {  // a completed round is applied before anyone starts the next
          std::unique_lock lk(mu_);
          const std::uint64_t slow = slowest();
          const bool drained = closing_ && queue_.empty() && std::none_of(busy_.begin(), busy_.end(), [](const auto& b) { return b.has_value(); });
          lk.unlock();
          if (slow > applied || drained) {
            tell_servers(kApply, nullptr, 0, MPI_FLOAT);
            applied = slow;
            if (drained) {  // the last partial round: everyone level with the most advanced
              std::lock_guard lk2(mu_);
              std::uint64_t top = 0;
              for (std::size_t w = 0; w < clock_.size(); ++w)
                if (live_[w]) top = std::max(top, clock_[w]);
              for (std::size_t w = 0; w < clock_.size(); ++w)
                if (live_[w]) clock_[w] = top;
              applied = top;
            }
          }
        }
        {  // a worker that holds a step longer than the timeout is reported
          std::lock_guard lk(mu_);
          for (std::size_t w = 0; w < busy_.size(); ++w)
            if (busy_[w] && std::chrono::steady_clock::now() - sent_at_[w] > o_.timeout) {
              detail::mpi::runtime().note_failure(o_.timeout);
              throw CollectiveTimeout("strata: worker " + std::to_string(w) + " (rank " +
                                      std::to_string(spec_.workers[w]) + ") has not answered step " +
                                      std::to_string(busy_[w]->id) + " within " + std::to_string(o_.timeout.count()) +
                                      " ms");
            }
        }
        if (acted) idle = 0;
        else if (idle > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      // the servers' value after the run becomes the chief's
      std::vector<std::vector<float>> parts(spec_.servers.size());
      std::vector<MPI_Request> reqs;
      for (std::size_t s = 0; s < parts.size(); ++s) {
        parts[s].resize(count_of(s));
        reqs.push_back(irecv(parts[s].data(), parts[s].size(), server_rank(s), kReadReply));
      }
      for (std::size_t s = 0; s < parts.size(); ++s) reqs.push_back(isend(nullptr, 0, server_rank(s), kRead));
      wait_all(reqs, "the servers' values at the end of a run");
      for (std::size_t s = 0; s < parts.size(); ++s) scatter(s, parts[s], value_.span());
    } catch (...) {
      std::lock_guard lk(mu_);
      if (!fatal_) fatal_ = std::current_exception();
      for (auto& t : queue_) t.state->finish(std::nullopt, fatal_);
      for (auto& b : busy_)
        if (b) b->state->finish(std::nullopt, fatal_);
      queue_.clear();
      for (auto& b : busy_) b.reset();
      pending_ = 0;
    }
    std::lock_guard lk(mu_);
    running_ = false;
    cv_.notify_all();
  }

  [[nodiscard]] std::vector<std::uint64_t> counts(int which) const {
    std::vector<std::uint64_t> v;
    for (int s = 0; s < o_.servers; ++s)
      v.push_back(store_ && spec_.server_index(rank_) == s ? (which ? store_->pulls(s) : store_->pushes(s)) : 0);
    return v;
  }

  ClusterSpec spec_;
  ParameterServerOptions o_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  Role role_ = Role::Chief;
  std::vector<Range> shards_;
  std::vector<std::vector<std::size_t>> by_server_;
  Tensor<float> value_;  // the chief's copy between runs (every rank's layout)
  ServerUpdate update_;
  std::unique_ptr<ShardStore<float>> store_;  // on a server: its shards (of a full-size vector)
  std::function<StepOutput(int, const StepInput&)> step_;
  // the chief's coordinator
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::deque<Task> queue_;
  std::vector<std::optional<Task>> busy_;
  std::vector<std::chrono::steady_clock::time_point> sent_at_;
  std::vector<std::uint64_t> clock_;
  std::vector<bool> live_;
  std::vector<WorkerFailure> failures_;
  std::exception_ptr fatal_, lost_;
  std::atomic<std::uint64_t> max_gap_{0};
  std::uint64_t next_id_ = 0;
  std::size_t pending_ = 0;
  bool running_ = false, closing_ = false;
};

}  // namespace strata
