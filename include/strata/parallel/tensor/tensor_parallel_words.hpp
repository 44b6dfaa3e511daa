#pragma once
//! What the tensor-parallel executor (tensor_parallel_executor.hpp) checks
//! of the replica counts and says of its choices: T dividing every
//! worker's replicas (a copy's members are one worker's), and the summary's
//! sentence about the copies' sum (unsharded or ZeRO 1, by buckets or after
//! backward, compressed); the options it refuses.
//!   detail::check_tensor_counts({4, 4}, 2);   // two workers of 4 replicas, T = 2
//!   std::string s = detail::describe_tensor_copies({.split = "...", .copies = 2, ...});

#include <cstddef>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/gradient/compression.hpp>
#include <strata/execution/executor_options.hpp>

namespace strata::detail {

//! T divides each worker's replica count (`counts`, one per worker; one in
//! a single process), else an Error saying which worker and what to give.
inline void check_tensor_counts(const std::vector<std::size_t>& counts, std::size_t T) {
  for (std::size_t w = 0; w < counts.size(); ++w)
    if (counts[w] % T != 0)
      throw Error("ExecutorOptions::tensor_parallel = " + std::to_string(T) + " does not divide the " +
                  std::to_string(counts[w]) + " replicas" +
                  (counts.size() > 1 ? " of worker " + std::to_string(w) : std::string()) +
                  ": each copy of the model takes " + std::to_string(T) + " replicas" +
                  (counts.size() > 1 ? " of one worker (its sums inside forward and backward stay within a "
                                       "worker, as Megatron keeps a tensor group within a node)"
                                     : std::string()) +
                  "; give a multiple of " + std::to_string(T) + " replicas" + (counts.size() > 1 ? " per worker" : ""));
}

//! The options tensor parallelism does not take, refused with a sentence
//! (`slicing`: the replicas' contexts reduce-scatter and all-gather over every replica).
inline void check_tensor_options(const ExecutorOptions& o, bool slicing) {
  if (o.sharded_update == ShardedUpdate::Gradients || o.sharded_update == ShardedUpdate::Parameters)
    throw Error("ExecutorOptions::tensor_parallel: tensor parallelism reduces each member's gradient over the "
                "copies itself; it does not combine with sharded_update Gradients or Parameters (ZeRO 2 and 3) "
                "(yet): leave it at Auto, Off or On (ZeRO 1)");
  if (o.sharded_update == ShardedUpdate::On && !slicing)
    throw Error("ExecutorOptions::tensor_parallel with ShardedUpdate::On (ZeRO 1): this strategy's replicas cannot "
                "reduce-scatter and all-gather over every replica; use ShardedUpdate::Off");
}

//! What the summary says of a tensor-parallel run's copies.
struct TensorCopies {
  std::string split;            //!< the model's words for what is split (describe_tensor_split)
  std::size_t copies = 1;       //!< data-parallel copies over all workers
  std::size_t replicas = 1;     //!< replicas in sync
  int workers = 1;
  bool sharded = false;         //!< ZeRO 1 over the logical parameters
  std::size_t buckets = 0;      //!< the copies' sum's buckets (0: after backward)
  std::size_t bucket_bytes = 0; //!< asked for (ExecutorOptions::bucket_bytes)
  std::size_t params = 0;
  Compression compression = Compression::None;
};

[[nodiscard]] inline std::string describe_tensor_copies(const TensorCopies& c) {
  const std::string p = std::to_string(c.replicas), W = std::to_string(c.workers);
  std::string out = c.split + "; " + std::to_string(c.copies) +
                    (c.copies == 1 ? " copy" : " data-parallel copies, each member's gradient summed with its peers'");
  if (c.sharded)
    out += "; the update sharded (ZeRO 1) over the " + p + " replicas" +
           (c.workers > 1 ? " of " + W + " workers" : std::string()) +
           ": the members' parts reduce-scattered over the logical parameters, each replica updating its 1/" + p +
           " slice with its 1/" + p + " of the optimizer state, the slices all-gathered";
  else if (c.buckets)
    out += " (across " + W + " workers: the members' parts of the logical gradient in " + std::to_string(c.buckets) +
           (c.buckets == 1 ? " bucket" : " buckets") + " of " + std::to_string((c.bucket_bytes + 1023) >> 10) +
           " KiB, each all-reduced as backward ends it)";
  else if (c.workers > 1)
    out += " (across " + W + " workers: one all-reduce of the members' parts)";
  if (c.bucket_bytes && !c.buckets && c.params)
    out += std::string("; the copies' sum after backward, not by buckets (") +
           (c.sharded ? "the sharded update reduce-scatters the whole gradient"
                      : "they apply where the copies' sum crosses workers") +
           ")";
  if (c.compression != Compression::None)
    out += std::string("; each member's gradient rounded to ") + std::string(to_string(c.compression)) +
           (c.sharded ? " for the reduce-scatter" : " for the copies' sum") +
           " (error feedback: what the rounding lost added to its next step's)";
  return out;
}

}  // namespace strata::detail
