#include "lib/distributed/distributed_env.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/util/status_macros.h"

extern char** environ;

namespace titan {
namespace {

using EnvMap = absl::flat_hash_map<std::string, std::string>;

const char* Lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

absl::StatusOr<int> ParseIntVar(const EnvMap& env, const std::string& name) {
  const char* value = Lookup(env, name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, " is not set"));
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, ": expected integer, got \"", value, "\""));
  }
  return parsed;
}

absl::StatusOr<int> ParseIntVarOr(const EnvMap& env, const std::string& name, int fallback) {
  if (Lookup(env, name) == nullptr) return fallback;
  return ParseIntVar(env, name);
}

// Slurm writes tasks per node as "2(x3),1" (three nodes with 2 tasks, then one with 1).
absl::StatusOr<int> TasksOnNode(absl::string_view var, absl::string_view tasks_per_node,
                                int node_id) {
  int node = 0;
  for (absl::string_view group : absl::StrSplit(tasks_per_node, ',')) {
    int tasks = 0;
    int repeat = 1;
    absl::string_view count = group;
    size_t paren = group.find("(x");
    if (paren != absl::string_view::npos) {
      count = group.substr(0, paren);
      absl::string_view times = group.substr(paren + 2);
      if (!absl::ConsumeSuffix(&times, ")") || !absl::SimpleAtoi(times, &repeat)) {
        return absl::InvalidArgumentError(absl::StrCat("environment variable ", var, ": bad group \"",
                                                       group, "\" in \"", tasks_per_node, "\""));
      }
    }
    if (!absl::SimpleAtoi(count, &tasks)) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", var, ": bad group \"",
                                                     group, "\" in \"", tasks_per_node, "\""));
    }
    if (node_id < node + repeat) return tasks;
    node += repeat;
  }
  return absl::InvalidArgumentError(absl::StrCat("environment variable ", var, "=\"", tasks_per_node,
                                                 "\" lists fewer than ", node_id + 1, " nodes"));
}

// The first host of a Slurm hostlist ("gpu[07-09,12],cpu1" -> "gpu07"); written by hand because
// expanding it otherwise needs `scontrol show hostnames`, a subprocess that may not be installed.
std::string FirstSlurmHost(absl::string_view nodelist) {
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] == '[') {
      ++i;
      while (i < nodelist.size() && nodelist[i] != ',' && nodelist[i] != '-' &&
             nodelist[i] != ']') {
        host.push_back(nodelist[i++]);
      }
      while (i < nodelist.size() && nodelist[i] != ']') ++i;
      ++i;
    } else {
      host.push_back(nodelist[i++]);
    }
  }
  return host;
}

absl::Status Validate(const DistributedEnv& env) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(env.source, " environment: rank ", env.rank,
                                                   " is outside world size ", env.world_size));
  }
  if (env.local_world_size < 1 || env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(env.source, " environment: local rank ", env.local_rank,
                     " is outside local world size ", env.local_world_size));
  }
  if (env.master_port < 1 || env.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        env.source, " environment: MASTER_PORT ", env.master_port, " is not a TCP port"));
  }
  if (env.master_addr.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(env.source, " environment: empty MASTER_ADDR"));
  }
  return absl::OkStatus();
}

// The launcher's socket must be what it says; a stale variable (copied into another job's
// environment) would otherwise make rank 0 serve the store on some unrelated descriptor.
absl::Status CheckStoreListenFd(const DistributedEnv& env) {
  const int fd = env.store_listen_fd;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  int listening = 0;
  socklen_t listening_len = sizeof(listening);
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) == 0 && listening) {
    if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  if (port != env.master_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", kStoreListenFdVar, "=", fd,
                     ": not a socket listening on MASTER_PORT ", env.master_port,
                     " (titan's launcher sets it for rank 0 alone; unset it)"));
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DistributedEnv> DetectDistributedEnvFrom(const EnvMap& env) {
  DistributedEnv result;
  if (Lookup(env, "RANK") != nullptr || Lookup(env, "WORLD_SIZE") != nullptr) {
    result.source = "torchrun";
    TITAN_ASSIGN_OR_RETURN(result.rank, ParseIntVar(env, "RANK"));
    TITAN_ASSIGN_OR_RETURN(result.world_size, ParseIntVar(env, "WORLD_SIZE"));
    // Hand-set RANK/WORLD_SIZE without the local pair means one node.
    TITAN_ASSIGN_OR_RETURN(result.local_rank, ParseIntVarOr(env, "LOCAL_RANK", result.rank));
    TITAN_ASSIGN_OR_RETURN(result.local_world_size,
                           ParseIntVarOr(env, "LOCAL_WORLD_SIZE", result.world_size));
  } else if (Lookup(env, "SLURM_PROCID") != nullptr) {
    result.source = "slurm";
    TITAN_ASSIGN_OR_RETURN(result.rank, ParseIntVar(env, "SLURM_PROCID"));
    TITAN_ASSIGN_OR_RETURN(result.world_size, ParseIntVar(env, "SLURM_NTASKS"));
    TITAN_ASSIGN_OR_RETURN(result.local_rank, ParseIntVarOr(env, "SLURM_LOCALID", 0));
    TITAN_ASSIGN_OR_RETURN(int node_id, ParseIntVarOr(env, "SLURM_NODEID", 0));
    const char* per_node_var = Lookup(env, "SLURM_STEP_TASKS_PER_NODE") != nullptr
                                   ? "SLURM_STEP_TASKS_PER_NODE"
                                   : "SLURM_TASKS_PER_NODE";
    if (const char* per_node = Lookup(env, per_node_var)) {
      TITAN_ASSIGN_OR_RETURN(result.local_world_size, TasksOnNode(per_node_var, per_node, node_id));
    } else {
      result.local_world_size = result.world_size;
    }
    const char* nodelist = Lookup(env, "SLURM_JOB_NODELIST");
    if (nodelist == nullptr) nodelist = Lookup(env, "SLURM_NODELIST");
    if (Lookup(env, "MASTER_ADDR") == nullptr && nodelist == nullptr) {
      return absl::InvalidArgumentError(
          "slurm environment: neither MASTER_ADDR nor SLURM_JOB_NODELIST is set");
    }
    if (nodelist != nullptr) result.master_addr = FirstSlurmHost(nodelist);
    // Every task of one job derives the same port; different jobs on one host rarely collide.
    TITAN_ASSIGN_OR_RETURN(int job_id, ParseIntVarOr(env, "SLURM_JOB_ID", 0));
    result.master_port = 10000 + job_id % 20000;
  } else if (Lookup(env, "OMPI_COMM_WORLD_RANK") != nullptr) {
    result.source = "openmpi";
    TITAN_ASSIGN_OR_RETURN(result.rank, ParseIntVar(env, "OMPI_COMM_WORLD_RANK"));
    TITAN_ASSIGN_OR_RETURN(result.world_size, ParseIntVar(env, "OMPI_COMM_WORLD_SIZE"));
    TITAN_ASSIGN_OR_RETURN(result.local_rank, ParseIntVar(env, "OMPI_COMM_WORLD_LOCAL_RANK"));
    TITAN_ASSIGN_OR_RETURN(result.local_world_size,
                           ParseIntVar(env, "OMPI_COMM_WORLD_LOCAL_SIZE"));
    if (Lookup(env, "MASTER_ADDR") == nullptr && result.local_world_size != result.world_size) {
      return absl::InvalidArgumentError(
          "openmpi environment: ranks span several hosts but MASTER_ADDR is not set (pass "
          "`mpirun -x MASTER_ADDR=<host of rank 0>`)");
    }
  }
  if (const char* addr = Lookup(env, "MASTER_ADDR")) result.master_addr = addr;
  TITAN_ASSIGN_OR_RETURN(result.master_port, ParseIntVarOr(env, "MASTER_PORT", result.master_port));
  if (result.rank == 0) {
    TITAN_ASSIGN_OR_RETURN(result.store_listen_fd, ParseIntVarOr(env, kStoreListenFdVar, -1));
  }
  TITAN_RETURN_IF_ERROR(Validate(result));
  return result;
}

absl::StatusOr<DistributedEnv> DetectDistributedEnv() {
  EnvMap env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == absl::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  TITAN_ASSIGN_OR_RETURN(DistributedEnv result, DetectDistributedEnvFrom(env));
  if (result.store_listen_fd >= 0) TITAN_RETURN_IF_ERROR(CheckStoreListenFd(result));
  return result;
}

}  // namespace titan
