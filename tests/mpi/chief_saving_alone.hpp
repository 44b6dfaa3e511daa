#pragma once
// Under sharded state across workers (ZeRO 1-3, tensor parallelism's ZeRO 1)
// save_checkpoint is collective: a chief that calls it alone while the other
// workers train on must fail on every worker within the deadline (the chief's
// error saying to save on every worker together), and write no file.
//   strata_test::check_chief_saving_alone(s, model, ds, "/tmp/x.ckpt");   // every worker calls it
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <strata/core/error.hpp>
#include <strata/nn.hpp>

namespace strata_test {

// `s`: the workers' strategy, made with a deadline under 5 s; `model` trained on `ds` under it.
template <class S, class M, class D>
void check_chief_saving_alone(S& s, M& model, D& ds, const std::filesystem::path& path) {
  using namespace std::chrono_literals;
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    if (s.is_chief()) model.save_checkpoint(path);  // wrong here: the others hold shards of the optimizer state
    else model.fit(ds, {.epochs = 1, .verbose = strata::nn::Verbosity::Silent});
  } catch (const strata::Error& e) {
    what = e.what();
  }
  INFO("worker ", s.worker_index(), ": ", what);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  if (s.is_chief()) {
    CHECK(what.find("on every worker together") != std::string::npos);
    CHECK(!std::filesystem::exists(path));
  } else {
    CHECK(!what.empty());
  }
}

}  // namespace strata_test
