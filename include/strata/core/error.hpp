#pragma once
//! Typed errors. Every message names what was called, by whom, what was
//! expected and what arrived, so that a user can act on it.

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

//! Base of every error strata throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

//! A value had the wrong shape, size or type (for example two tensors that
//! must match do not).
class ShapeError : public Error {
 public:
  using Error::Error;
};

//! Training stopped on non-finite values (NaN or infinity) it could not
//! skip: nn::FitOptions::max_bad_steps consecutive steps whose reduced
//! gradient held some. `step()`: the last such step within its epoch.
//!   try { model.fit(data); } catch (const strata::NonFiniteError& e) { e.step(); }
class NonFiniteError : public Error {
 public:
  NonFiniteError(const std::string& what, std::size_t step) : Error(what), step_(step) {}
  [[nodiscard]] std::size_t step() const noexcept { return step_; }

 private:
  std::size_t step_;
};

//! Base of the errors raised by a collective operation.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

//! Replicas called a collective with arguments that disagree (a different
//! operation, element count, data type, root). Every replica of the call
//! raises it, with the same message naming each replica's arguments.
class CollectiveMismatch : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

//! A collective could not complete: a replica never arrived within the
//! timeout, or finished its work without calling the collective at all.
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

//! Raised inside a replica whose collective was abandoned because another
//! replica failed; `Strategy::run` reports the original failure instead.
class CollectiveAborted : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

namespace detail {
//! What an exception says, for a message that carries it on.
inline std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}
}  // namespace detail

//! The error `Strategy::run` throws when the function failed on a replica.
//! `replica()` names the replica whose failure explains the others (its own
//! exception before a collective that could not complete, before
//! CollectiveAborted; the lowest id among equals); `cause()` holds what it
//! threw.
class ReplicaError : public Error {
 public:
  ReplicaError(int replica, int num_replicas, std::exception_ptr cause, const std::string& what)
      : Error("replica " + std::to_string(replica) + " of " + std::to_string(num_replicas) +
              " failed in Strategy::run: " + what),
        replica_(replica),
        cause_(std::move(cause)) {}

  [[nodiscard]] int replica() const noexcept { return replica_; }
  [[nodiscard]] std::exception_ptr cause() const noexcept { return cause_; }
  [[noreturn]] void rethrow_cause() const { std::rethrow_exception(cause_); }

 private:
  int replica_;
  std::exception_ptr cause_;
};

}  // namespace strata
