// Gloo headers and ABI: the torch wheel ships c10d's ProcessGroupGloo.hpp but not the gloo headers
// it includes, so this file compiles against Debian's libgloo-dev headers (an older gloo) and links
// no gloo library: every gloo function that runs is the copy inside libtorch_cpu.so. That is sound
// because this file (1) calls only exported, out-of-line c10d functions (ProcessGroupGloo's
// constructor, Options::Options, createDevice*), and lib/distributed/backend_communicator.cc only
// the virtuals of c10d::Backend / c10d::Work, whose vtables live in libtorch; (2) allocates
// ProcessGroupGloo and its Options, whose members hold gloo objects only through std::shared_ptr
// (or vectors of them), so their sizes and layouts do not depend on which gloo headers were read;
// (3) never runs inline code that touches a gloo object (setTimeout is reached through Backend's
// vtable, i.e. LibTorch's copy; GlooStore and gloo::Context members are left alone).
// //tests/distributed:gloo_abi_test checks that the linked binary neither defines nor references a
// gloo:: symbol of its own.
#include "lib/distributed/gloo_communicator.h"

#include <c10/util/Exception.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/distributed/backend_communicator.h"
#include "lib/distributed/group_state.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Which local address peers reach this process on: GLOO_SOCKET_IFNAME (as in PyTorch) names an
// interface; a loopback master means a one-host job; otherwise this host's name must resolve.
std::shared_ptr<::gloo::transport::Device> CreateDevice(const DistributedEnv& env) {
  if (const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME")) {
    const std::vector<std::string> names = absl::StrSplit(interfaces, ',');
    return c10d::ProcessGroupGloo::createDeviceForInterface(names.front());
  }
  if (env.master_addr == "localhost" || absl::StartsWith(env.master_addr, "127.")) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Gloo writes with writev, which raises SIGPIPE on a socket whose peer has gone: the rank would die
// silently (exit 141) instead of failing with c10d's error. Python ignores SIGPIPE, so under
// torchrun c10d reports it; a rank of titan must too.
void IgnoreBrokenPipes() {
  static const bool ignored = [] {
    struct sigaction action {};
    action.sa_handler = SIG_IGN;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGPIPE, &action, nullptr) == 0;
  }();
  (void)ignored;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    absl::Duration timeout, std::shared_ptr<CommTrace> trace) {
  IgnoreBrokenPipes();
  const DistributedEnv& env = rendezvous->env();
  TITAN_ASSIGN_OR_RETURN(const int rank, GroupRankOf(name, global_ranks, env.rank));
  const int size = static_cast<int>(global_ranks.size());
  const c10::intrusive_ptr<c10d::Store>& store = rendezvous->store();
  auto group = std::make_shared<GroupState>(
      name, global_ranks, rank,
      c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/progress/", name), store));
  const absl::Time start = absl::Now();
  try {
    // Operation #0 is joining the group.
    group->MarkArrived(0);
    group->PublishProgress();  // at once: a member without the key never joined
    c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options =
        c10d::ProcessGroupGloo::Options::create(
            std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout))));
    options->devices.push_back(CreateDevice(env));
    options->group_name = name;
    options->global_ranks_in_group.assign(global_ranks.begin(), global_ranks.end());
    c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/gloo/", name), store), rank,
        size, options);
    return MakeBackendCommunicator(std::move(group), std::move(backend), "gloo",
                                   c10::Device(c10::DeviceType::CPU), timeout, std::move(trace));
  } catch (const std::exception& e) {
    // Members that never joined have no progress key at all.
    if (trace) trace->DumpAllRanks(absl::StrCat("joining group \"", name, "\": ", Reason(e)));
    return group->Failure("create_group", 0, start, Reason(e));
  }
}

}  // namespace titan
