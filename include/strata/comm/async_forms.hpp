#pragma once
//! The buffers a communicator takes, and the non-blocking forms of its
//! collectives written once for every communicator (the in-process one and
//! MPI's): each *_async form unpacks its buffers, checks the operation, and
//! queues the communicator's own blocking body behind its earlier operations,
//! returning the strata::Work. A communicator derives from AsyncForms<Self>
//! and supplies only how an operation is queued and its blocking bodies:
//!   template <class What, class Body> Work submit_with(const char* name, What what, Body body);
//!     // body(self) runs the operation on whichever thread runs it
//!   all_reduce_now(in, out, n, out_n, op, algo), broadcast_now(data, n, root),
//!   reduce_scatter_now<Op>(in, n, out, out_n), all_gather_now(in, n, out, out_n), barrier_now()
//!   template <class A> static constexpr bool takes_algorithm = ...;  // the algorithms it names
//! (befriending AsyncForms<Self> when they are private).
//!   class MyComm : public detail::AsyncForms<MyComm> { ... };
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

//! A contiguous buffer of collective-capable elements.
template <class R>
concept Buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                 Element<std::remove_cv_t<std::ranges::range_value_t<R>>>;

//! A buffer whose elements may be written.
template <class R>
concept MutableBuffer = Buffer<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

namespace detail {

template <class R>
using buffer_element_t = std::remove_cv_t<std::ranges::range_value_t<R>>;

//! `A` is an all-reduce algorithm `Comm` names (looked up once `Comm` is complete).
template <class Comm, class A>
concept TakesAlgorithm = Comm::template takes_algorithm<A>;

//! The non-blocking forms of `Comm`'s collectives (see the file comment).
//! Each queues the collective behind the communicator's earlier operations
//! (of this replica, of this MPI communicator) and returns its Work at once;
//! the progress thread runs it with the very code of the blocking form (the
//! same contract, deadline and bits). The buffers belong to the operation
//! until its Work says it ended (comm/work.hpp): they must be views or
//! lvalues (borrowed ranges), never temporaries that own their elements.
//! A failure is the Work's typed error.
template <class Comm>
class AsyncForms {
 public:
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
