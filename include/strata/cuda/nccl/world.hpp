#pragma once
//! NCCL across processes: NcclCommunicator::world, one NCCL rank per MPI
//! process, and its host contract over MPI. Needs the MPI backend too (link
//! strata-mpi and strata-nccl).
//!   auto mpi = strata::MpiCommunicator::world();
//!   strata::cuda::Stream stream{local_rank};
//!   auto comm = strata::NcclCommunicator::world(mpi, local_rank, stream.get());
//! Set-up, each step agreed by every rank over MPI (so every rank raises the
//! same error instead of some hanging in NCCL): every rank's GPU (host,
//! index, UUID) is gathered and two ranks on one GPU are a strata::Error
//! naming them; rank 0's ncclUniqueId is broadcast; each rank initializes
//! its non-blocking NCCL communicator under the timeout; every rank's outcome
//! is gathered, and if one failed every rank aborts.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/gpu_choice.hpp>
#include <strata/comm/mpi/communicator.hpp>
#include <strata/comm/mpi/contract.hpp>
#include <strata/cuda/nccl/communicator.hpp>
#include <strata/cuda/nccl/contract.hpp>
#include <strata/cuda/nccl/identity.hpp>
#include <strata/cuda/nccl/rank.hpp>
#include <strata/cuda/device.hpp>

namespace strata {
namespace detail::nccl {

//! The ranks are MPI processes: each collective's call description travels
//! in a fixed-size all-gather (the MPI communicator's own contract and
//! deadline apply to it) and every rank compares all of them, so every rank
//! raises the same CollectiveMismatch; headers are small MPI messages.
//! The MPI communicator is the NCCL communicator's own (split from the
//! caller's), so its messages never mix with the program's.
class MpiContract final : public Contract {
 public:
  explicit MpiContract(MpiCommunicator mpi) : mpi_(std::move(mpi)) {}

  std::uint64_t agree(const CallDesc& d, std::vector<std::size_t>* counts) override {
    const auto p = static_cast<std::size_t>(mpi_.size());
    const mpi::WireCall w = mpi::to_wire(++seq_, d);
    std::array<std::int64_t, words> mine{};
    std::memcpy(mine.data(), &w, sizeof(w));
    all_.resize(words * p);
    mpi_.all_gather(mine, all_);
    calls_.resize(p);
    for (std::size_t r = 0; r < p; ++r) std::memcpy(static_cast<void*>(&calls_[r]), all_.data() + r * words, sizeof(mpi::WireCall));
    if (std::string why = mpi::contract_violation(calls_, mpi_.rank()); !why.empty()) {
      mpi_.agreed_failure();  // every rank gathered the same calls: each raises it, none need be told
      throw CollectiveMismatch(why);
    }
    if (counts != nullptr) {
      counts->resize(p);
      for (std::size_t r = 0; r < p; ++r) (*counts)[r] = static_cast<std::size_t>(calls_[r].in_count);
    }
    return seq_;
  }

  void post(int peer, const Header& h) override {
    const std::array<std::int64_t, 3> a{h.tag, h.count, h.dtype};
    mpi_.send(a, peer, channel);
  }

  Header take(int peer) override {
    std::array<std::int64_t, 3> a{};
    mpi_.recv(a, peer, channel);
    return Header{.tag = a[0], .count = a[1], .dtype = a[2]};
  }

  void fail(const std::string& why) noexcept override {
    try {
      mpi_.abort(why);
    } catch (...) {  // bounded and best effort: the other ranks time out otherwise
    }
  }

  [[nodiscard]] std::string failed_elsewhere() override { return mpi_.poisoned(); }

 private:
  static constexpr std::size_t words = sizeof(mpi::WireCall) / sizeof(std::int64_t);
  static_assert(sizeof(mpi::WireCall) % sizeof(std::int64_t) == 0);
  static constexpr int channel = 0;  // the MPI tag of headers: one ordered channel per pair
  MpiCommunicator mpi_;
  std::uint64_t seq_ = 0;
  std::vector<std::int64_t> all_;
  std::vector<mpi::WireCall> calls_;
};

//! One rank's GPU as it travels to the others (fixed size, trivially copyable).
struct WireGpu {
  enum : std::int64_t { usable = 0, no_such_device = 1, stream_elsewhere = 2, unreadable = 3 };
  std::int64_t status = usable;
  std::int64_t device = 0;
  std::int64_t count = 0;          // CUDA devices this rank sees
  std::int64_t stream_device = -1;  // with stream_elsewhere: the stream's GPU
  char host[256] = {};
  char uuid[48] = {};
};
static_assert(sizeof(WireGpu) % sizeof(std::int64_t) == 0);

//! The WireGpu at `words` (as an all-gather delivered it), its strings terminated.
inline WireGpu read_wire_gpu(const std::int64_t* words) {
  WireGpu w;
  std::memcpy(static_cast<void*>(&w), words, sizeof(w));
  w.host[sizeof(w.host) - 1] = '\0';
  w.uuid[sizeof(w.uuid) - 1] = '\0';
  return w;
}
inline GpuIdentity identity_of(const WireGpu& w) {
  return GpuIdentity{.host = w.host, .device = static_cast<int>(w.device), .uuid = w.uuid};
}

//! This rank's GPU `device` and stream, described without throwing (every
//! rank must reach the exchange, whatever is wrong with its GPU).
inline WireGpu describe_gpu(int device, [[maybe_unused]] cudaStream_t stream) {
  WireGpu w;
  w.device = device;
  w.count = cuda::device_count();
  const std::string host = strata::nccl::host_name();
  std::memcpy(w.host, host.data(), std::min(host.size(), sizeof(w.host) - 1));
  if (device < 0 || device >= w.count) {
    w.status = WireGpu::no_such_device;
    return w;
  }
  try {
    const std::string uuid = strata::nccl::local_gpu(device).uuid;
    std::memcpy(w.uuid, uuid.data(), std::min(uuid.size(), sizeof(w.uuid) - 1));
  } catch (const std::exception&) {
    w.status = WireGpu::unreadable;
    return w;
  }
#if CUDART_VERSION >= 12080
  int d = -1;
  if (stream != nullptr) {
    const cudaError_t e = cudaStreamGetDevice(stream, &d);
    if (e == cudaSuccess && d != device) {
      w.status = WireGpu::stream_elsewhere;
      w.stream_device = d;
    }
    cuda::detail::ignore(e);
  }
#endif
  return w;
}

}  // namespace detail::nccl

inline NcclCommunicator NcclCommunicator::world(MpiCommunicator& mpi, int device, cudaStream_t stream,
                                                CommOptions opts) {
  namespace dn = detail::nccl;
  const std::string who = "strata: NcclCommunicator::world";
  MpiCommunicator own = mpi.split(0, mpi.rank());
  const int p = own.size(), me = own.rank();
  const auto up = static_cast<std::size_t>(p);

  // 1. Every rank's GPU, checked before NCCL sees any of them.
  constexpr std::size_t gpu_words = sizeof(dn::WireGpu) / sizeof(std::int64_t);
  std::array<std::int64_t, gpu_words> mine{};
  {
    const dn::WireGpu w = dn::describe_gpu(device, stream);
    std::memcpy(mine.data(), &w, sizeof(w));
  }
  std::vector<std::int64_t> all(gpu_words * up);
  own.all_gather(mine, all);
  std::vector<GpuIdentity> ids;
  std::string problems;
  for (std::size_t r = 0; r < up; ++r) {
    const dn::WireGpu w = dn::read_wire_gpu(all.data() + r * gpu_words);
    const std::string host = w.host[0] != '\0' ? std::string(w.host) : std::string("its host");
    const std::string rank = "rank " + std::to_string(r);
    std::string problem;
    if (w.status == dn::WireGpu::no_such_device)
      problem = rank + " asked for GPU " + std::to_string(w.device) + " but " + host + " has " +
                std::to_string(w.count) + " GPU(s) visible to it";
    else if (w.status == dn::WireGpu::stream_elsewhere)
      problem = rank + "'s stream belongs to GPU " + std::to_string(w.stream_device) + ", not to its GPU " +
                std::to_string(w.device);
    else if (w.status == dn::WireGpu::unreadable)
      problem = rank + " could not read the properties of GPU " + std::to_string(w.device) + " on " + host;
    if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
    ids.push_back(dn::identity_of(w));
  }
  if (!problems.empty()) throw Error(who + ": " + problems);
  check_distinct_gpus(ids, "strata: NcclCommunicator::world");

  // 2. Rank 0's unique id, with its status (rank 0 takes part even if it failed).
  std::array<std::int64_t, 1 + sizeof(ncclUniqueId) / sizeof(std::int64_t)> idw{};
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  if (me == 0) {
    ncclUniqueId id{};
    idw[0] = ncclGetUniqueId(&id);
    std::memcpy(idw.data() + 1, &id, sizeof(id));
  }
  own.broadcast(idw, 0);
  if (idw[0] != ncclSuccess) {
    const auto r = static_cast<ncclResult_t>(idw[0]);
    throw NcclError("ncclGetUniqueId", r, 0, -1,
                    who + ": ncclGetUniqueId failed on rank 0: " + strata::nccl::result_name(r) + " (" +
                        ncclGetErrorString(r) + ")");
  }
  ncclUniqueId id{};
  std::memcpy(&id, idw.data() + 1, sizeof(id));

  // 3. This rank's NCCL communicator: non-blocking, polled under the timeout.
  ncclComm_t comm = nullptr;
  std::exception_ptr error;
  {
    cuda::DeviceGuard guard{device};
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const auto deadline = dn::Clock::now() + opts.timeout;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, p, id, me, &config);
    const ncclResult_t state = (r == ncclSuccess || r == ncclInProgress) && comm != nullptr
                                   ? dn::poll_state(comm, deadline)
                                   : (r == ncclSuccess || r == ncclInProgress ? ncclInternalError : r);
    if (state == ncclInProgress)
      error = std::make_exception_ptr(CollectiveTimeout(who + ": NCCL did not initialize rank " + std::to_string(me) +
                                                        " (GPU " + std::to_string(device) + ") within " +
                                                        std::to_string(opts.timeout.count()) + " ms"));
    else if (state != ncclSuccess)
      error = std::make_exception_ptr(strata::nccl::error(state, "ncclCommInitRankConfig", me, device,
                                                          "NcclCommunicator::world"));
  }
  auto rank = std::make_unique<dn::Rank>(comm, me, p, device, opts.timeout);

  // 4. Every rank's outcome: all go on, or all abort (a rank alone with a
  // communicator whose peers gave up would only hang in its first collective).
  const std::array<std::int64_t, 1> ok{error ? 1 : 0};
  std::vector<std::int64_t> oks(up);
  try {
    own.all_gather(ok, oks);
  } catch (const std::exception& e) {
    rank->abort(e.what());
    throw;
  }
  std::string failed;
  for (std::size_t r = 0; r < up; ++r)
    if (oks[r] != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty()) {
    const std::string why = error ? detail::what_of(error)
                                  : who + ": NCCL failed to initialize on rank(s) " + failed +
                                        " (their own errors say why); every rank aborts its communicator";
    rank->abort(why);
    if (error) std::rethrow_exception(error);
    throw CollectiveAborted(why);
  }
  dn::Rank* raw = rank.get();
  return NcclCommunicator(raw, std::move(rank), std::make_unique<dn::MpiContract>(std::move(own)), stream, opts);
}

}  // namespace strata
