#pragma once
//! PlacementPolicy: where replicas run and where variables live.

#include <concepts>
#include <string_view>

namespace strata {

//! The placement as a value, for code that sees a strategy without its type.
enum class PlacementKind { OneDevice, Mirrored, CentralStorage, ParameterServer, Pipeline };

//! Whether a placement's replicas may be GPUs (so far: one device, mirrored
//! and central storage; parameter servers and pipeline stages run on CPUs).
//! Strategy<...> checks its devices with it; the strategy catalogue
//! (strategy/catalog.hpp) says with it which names take --device gpu.
[[nodiscard]] constexpr bool placement_on_gpus(PlacementKind k) noexcept {
  return k == PlacementKind::OneDevice || k == PlacementKind::Mirrored || k == PlacementKind::CentralStorage ||
         k == PlacementKind::Pipeline;
}

//! One replica on one device; variables live on it.
struct OneDevice {
  using placement_policy = OneDevice;
  static constexpr PlacementKind kind = PlacementKind::OneDevice;
  static constexpr std::string_view name = "one_device";
};

//! One replica per device; each holds a copy of every variable, kept
//! identical by applying the same all-reduced update on every copy.
struct Mirrored {
  using placement_policy = Mirrored;
  static constexpr PlacementKind kind = PlacementKind::Mirrored;
  static constexpr std::string_view name = "mirrored";
};

//! One replica per device computes; each variable has a single copy on the
//! host, which replicas read and onto which gradients are reduced.
struct CentralStorage {
  using placement_policy = CentralStorage;
  static constexpr PlacementKind kind = PlacementKind::CentralStorage;
  static constexpr std::string_view name = "central_storage";
};

//! Variables sharded over parameter servers; workers pull them and push
//! gradients.
struct ParameterServer {
  using placement_policy = ParameterServer;
  static constexpr PlacementKind kind = PlacementKind::ParameterServer;
  static constexpr std::string_view name = "parameter_server";
};

//! Model parallelism: the model's layers split into stages, one per replica
//! (in order), each holding only its layers' variables; activations flow
//! forward and their gradients backward between neighbouring stages
//! (parallel/pipeline/pipeline_executor.hpp, docs/model-parallelism.md).
struct Pipeline {
  using placement_policy = Pipeline;
  static constexpr PlacementKind kind = PlacementKind::Pipeline;
  static constexpr std::string_view name = "pipeline";
};

//! A type that opts into being a placement policy.
template <class P>
concept PlacementPolicy = std::same_as<typename P::placement_policy, P>;

}  // namespace strata
