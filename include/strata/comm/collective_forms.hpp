#pragma once
//! The buffers a communicator takes, and the forms of its collectives written
//! once for every communicator (the in-process one and MPI's): each form
//! unpacks its buffers, checks the operation, and runs the communicator's own
//! body in issue order, blocking (ordered) or queued behind its earlier
//! operations, returning the strata::Work (the *_async forms). A communicator
//! derives from CollectiveForms<Self> and supplies only how an operation runs
//! and its bodies (befriending CollectiveForms<Self> when they are private):
//!   template <class Op, class What> void ordered(const char* name, Op&& op, What what);  // runs op() in order
//!   template <class What, class Body> Work submit_with(const char* name, What what, Body body);
//!     // queues body(self), run on whichever thread runs it
//!   all_reduce_now(in, out, n, out_n, op, algo), broadcast_now(data, n, root),
//!   reduce_scatter_now<Op>(in, n, out, out_n), all_gather_now(in, n, out, out_n), barrier_now()
//!   template <class A> static constexpr bool takes_algorithm = ...;  // the all-reduce algorithms it names
//!   class MyComm : public detail::CollectiveForms<MyComm> { ... };
//!   comm.all_reduce(grad, strata::Mean);
//!   strata::Work w = comm.all_reduce_async(bucket, strata::Sum);  ...;  w.wait();

#include <concepts>
#include <cstddef>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>

#include <strata/comm/algorithm/direct.hpp>
#include <strata/comm/progress.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/work.hpp>
#include <strata/core/concepts.hpp>

namespace strata {

//! A contiguous buffer of collective-capable elements (strata::WireElement:
//! a tensor's element types, and bf16 / fp16 for Sum).
template <class R>
concept Buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                 WireElement<std::remove_cv_t<std::ranges::range_value_t<R>>>;

//! A buffer whose elements may be written.
template <class R>
concept MutableBuffer = Buffer<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

namespace detail {

template <class R>
using buffer_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

//! `A` is an all-reduce algorithm `Comm` names (looked up once `Comm` is complete).
template <class Comm, class A>
concept TakesAlgorithm = Comm::template takes_algorithm<A>;

//! The collectives of `Comm` (see the file comment). A blocking form runs
//! now, or after the operations queued before it (then waited for). A
//! non-blocking form queues the collective behind the communicator's earlier
//! operations (of this replica, of this MPI communicator) and returns its
//! Work at once; the progress thread runs it with the very code of the
//! blocking form (the same contract, deadline and bits). Its buffers belong
//! to the operation until its Work says it ended (comm/work.hpp): they must
//! be views or lvalues (borrowed ranges), never temporaries that own their
//! elements. A failure is the Work's typed error.
template <class Comm>
class CollectiveForms {
 public:
  //! Every rank waits until all have arrived.
  void barrier() {
    self().ordered("barrier", [&] { self().barrier_now(); }, [] { return std::string("barrier()"); });
  }
  //! In-place all-reduce: afterwards every rank's `data` holds the reduction
  //! of all ranks' `data`.
  template <MutableBuffer R, ReduceOperation Op, class Algo = AutoReduce>
    requires TakesAlgorithm<Comm, Algo>
  void all_reduce(R&& data, Op op, Algo algo = {}) {
    using T = buffer_element_t<R>;
    check_op<Op, T>();
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    self().ordered("all_reduce", [&] { self().all_reduce_now(p, p, n, n, op, algo); }, Described<T>{"all_reduce", n});
  }
  //! Out-of-place all-reduce: `out` (same size as `in`) receives the result.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op, class Algo = AutoReduce>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>> && TakesAlgorithm<Comm, Algo>
  void all_reduce(In&& in, Out&& out, Op op, Algo algo = {}) {
    using T = buffer_element_t<Out>;
    check_op<Op, T>();
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    self().ordered("all_reduce", [&] { self().all_reduce_now(i, o, n, on, op, algo); }, Described<T>{"all_reduce", n});
  }
  //! Copies `root`'s `data` into every rank's `data`.
  template <MutableBuffer R>
  void broadcast(R&& data, int root) {
    using T = buffer_element_t<R>;
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    self().ordered("broadcast", [&] { self().broadcast_now(p, n, root); }, Described<T>{"broadcast", n});
  }
  //! Reduces `in` (same size everywhere) over the ranks and leaves shard
  //! `rank()` of the result in `out`, which must hold
  //! `shard_range(in.size(), size(), rank()).size()` elements.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>>
  void reduce_scatter(In&& in, Out&& out, Op) {
    using T = buffer_element_t<Out>;
    check_op<Op, T>();
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    self().ordered("reduce_scatter", [&] { self().template reduce_scatter_now<Op>(i, n, o, on); },
                   Described<T>{"reduce_scatter", n});
  }
  //! Concatenates every rank's `in` in rank order into each `out`; inputs
  //! may differ in size, `out` holds their sum.
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>>
  void all_gather(In&& in, Out&& out) {
    using T = buffer_element_t<Out>;
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    self().ordered("all_gather", [&] { self().all_gather_now(i, n, o, on); }, Described<T>{"all_gather", n});
  }

  //! In-place non-blocking all-reduce.
  template <MutableBuffer R, ReduceOperation Op, class Algo = AutoReduce>
    requires std::ranges::borrowed_range<R> && TakesAlgorithm<Comm, Algo>
  Work all_reduce_async(R&& data, Op op, Algo algo = {}) {
    using T = buffer_element_t<R>;
    check_op<Op, T>();
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    return self().submit_with("all_reduce", Described<T>{"all_reduce", n},
                              [p, n, op, algo](Comm& c) { c.all_reduce_now(p, p, n, n, op, algo); });
  }
  //! Out-of-place non-blocking all-reduce.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op, class Algo = AutoReduce>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>> && std::ranges::borrowed_range<In> &&
             std::ranges::borrowed_range<Out> && TakesAlgorithm<Comm, Algo>
  Work all_reduce_async(In&& in, Out&& out, Op op, Algo algo = {}) {
    using T = buffer_element_t<Out>;
    check_op<Op, T>();
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    return self().submit_with("all_reduce", Described<T>{"all_reduce", n},
                              [i, o, n, on, op, algo](Comm& c) { c.all_reduce_now(i, o, n, on, op, algo); });
  }
  //! Non-blocking broadcast.
  template <MutableBuffer R>
    requires std::ranges::borrowed_range<R>
  Work broadcast_async(R&& data, int root) {
    using T = buffer_element_t<R>;
    T* p = std::ranges::data(data);
    const std::size_t n = std::ranges::size(data);
    return self().submit_with("broadcast", Described<T>{"broadcast", n},
                              [p, n, root](Comm& c) { c.broadcast_now(p, n, root); });
  }
  //! Non-blocking reduce-scatter.
  template <Buffer In, MutableBuffer Out, ReduceOperation Op>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>> && std::ranges::borrowed_range<In> &&
             std::ranges::borrowed_range<Out>
  Work reduce_scatter_async(In&& in, Out&& out, Op) {
    using T = buffer_element_t<Out>;
    check_op<Op, T>();
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    return self().submit_with("reduce_scatter", Described<T>{"reduce_scatter", n},
                              [i, o, n, on](Comm& c) { c.template reduce_scatter_now<Op>(i, n, o, on); });
  }
  //! Non-blocking all-gather.
  template <Buffer In, MutableBuffer Out>
    requires std::same_as<buffer_element_t<In>, buffer_element_t<Out>> && std::ranges::borrowed_range<In> &&
             std::ranges::borrowed_range<Out>
  Work all_gather_async(In&& in, Out&& out) {
    using T = buffer_element_t<Out>;
    const T* i = std::ranges::data(in);
    T* o = std::ranges::data(out);
    const std::size_t n = std::ranges::size(in), on = std::ranges::size(out);
    return self().submit_with("all_gather", Described<T>{"all_gather", n},
                              [i, o, n, on](Comm& c) { c.all_gather_now(i, n, o, on); });
  }
  //! Non-blocking barrier: its Work completes once every rank arrived.
  Work barrier_async() {
    return self().submit_with("barrier", [] { return std::string("barrier()"); }, [](Comm& c) { c.barrier_now(); });
  }

 private:
  Comm& self() noexcept { return static_cast<Comm&>(*this); }
};

}  // namespace detail
}  // namespace strata
