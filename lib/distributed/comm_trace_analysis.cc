#include "lib/distributed/comm_trace_analysis.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "lib/distributed/comm_trace_dump.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// How the members that issued a collective disagree ("" when they agree).
std::string Disagreement(const std::map<int, const CommTraceEntry*>& issued) {
  const auto& [first_rank, first] = *issued.begin();
  for (const auto& [rank, entry] : issued) {
    if (entry->op != first->op) {
      return absl::StrCat("rank ", rank, " issued ", entry->op, ", rank ", first_rank, " ",
                          first->op);
    }
    // all_to_all may split unevenly; fr_trace does not compare its sizes either.
    if (first->op.find("all_to_all") == std::string::npos &&
        (entry->input_sizes != first->input_sizes || entry->output_sizes != first->output_sizes)) {
      return absl::StrCat("sizes differ: rank ", rank, " ", entry->input_sizes, " -> ",
                          entry->output_sizes, ", rank ", first_rank, " ", first->input_sizes,
                          " -> ", first->output_sizes);
    }
    if (entry->input_dtypes != first->input_dtypes ||
        entry->output_dtypes != first->output_dtypes) {
      return absl::StrCat("dtypes differ: rank ", rank, " ", entry->input_dtypes, " -> ",
                          entry->output_dtypes, ", rank ", first_rank, " ", first->input_dtypes,
                          " -> ", first->output_dtypes);
    }
  }
  return "";
}

// Dumps of one run only: a folder reused by a later run may still hold an earlier one's.
absl::Status CheckOneRun(const std::map<int, CommTraceDump>& dumps,
                         const std::map<int, std::string>& paths) {
  const auto& [first_rank, first] = *dumps.begin();
  for (const auto& [rank, dump] : dumps) {
    if (dump.run_id == first.run_id) continue;
    const auto run = [](const std::string& id) { return id.empty() ? "(none)" : id; };
    return absl::InvalidArgumentError(absl::StrCat(
        paths.at(first_rank), " (run ", run(first.run_id), ") and ", paths.at(rank), " (run ",
        run(dump.run_id), ") come from different runs; analyse one run's dumps alone"));
  }
  return absl::OkStatus();
}

// The ranks in every group `dump` records (ranks "[]": all of them); empty: none or no groups.
std::set<int> InEveryGroup(const CommTraceDump& dump, int world_size) {
  std::set<int> common;
  for (int rank = 0; rank < world_size; ++rank) common.insert(rank);
  for (const auto& [name, ranks] : dump.group_ranks) {
    if (ranks.empty()) continue;
    std::set<int> kept;
    for (int rank : ranks) {
      if (common.count(rank) > 0) kept.insert(rank);
    }
    common = std::move(kept);
  }
  return common;
}

// `dump`, named as `rank`'s, is that rank's: it says so ("rank"), or, in a dump without that key
// (c10d's own), every group it records holds `rank`, as a rank records only its own groups (the
// world group holds every rank, so one group alone proves nothing).
absl::Status CheckWriter(int rank, const CommTraceDump& dump, const std::string& path,
                         int world_size) {
  if (dump.writer.has_value()) {
    if (*dump.writer == rank) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(path, ": rank ", *dump.writer,
                                                   "'s dump (its \"rank\" key says so), not rank ",
                                                   rank, "'s as its file name says"));
  }
  for (const auto& [name, ranks] : dump.group_ranks) {
    if (ranks.empty() || std::count(ranks.begin(), ranks.end(), rank) > 0) continue;
    const std::set<int> owners = InEveryGroup(dump, world_size);
    const std::string whose =
        owners.size() == 1
            ? absl::StrCat("it seems to be rank ", *owners.begin(), "'s dump")
            : absl::StrCat(
                  "another rank's or another job's dump (the dumps' groups make a world of ",
                  world_size, " ranks)");
    return absl::InvalidArgumentError(absl::StrCat(path, ": rank ", rank, " is not in group ", name,
                                                   " (ranks ", absl::StrJoin(ranks, ","),
                                                   ") it records: ", whose));
  }
  return absl::OkStatus();
}

// `members`' group when some of them left no dump; `rows`: the others' progress in it.
std::optional<InconclusiveGroup> Inconclusive(const std::string& name,
                                              const std::vector<int>& members,
                                              const std::map<int, CommTraceDump>& dumps,
                                              const std::vector<RankProgress>& rows) {
  InconclusiveGroup group{name, members};
  for (int member : members) {
    if (dumps.count(member) == 0) group.missing_dumps.push_back(member);
  }
  if (group.missing_dumps.empty()) return std::nullopt;
  for (const RankProgress& row : rows) {
    if (row.last_seq > group.last_seq) {
      group.last_seq = row.last_seq;
      group.last_op = row.last_op;
      group.last_state = row.last_state;
      group.last_ranks.clear();
    }
    if (row.last_seq == group.last_seq) group.last_ranks.push_back(row.rank);
  }
  for (const RankProgress& row : rows) {
    if (row.first_pending == 0) continue;
    if (group.stuck_seq == 0 || row.first_pending < group.stuck_seq) {
      group.stuck_seq = row.first_pending;
      group.stuck_op = row.first_pending_op;
      group.stuck_state = row.first_pending_state;
      group.stuck_ranks.clear();
    }
    if (row.first_pending == group.stuck_seq) group.stuck_ranks.push_back(row.rank);
  }
  return group;
}

// Whether the `missing` members' dumps are older than the collective `issued` record: one reads
// completed there (it completes only once every member issued it), or every missing member's dump
// was written before the first issuer issued it. Its absence there says nothing of what the
// member did after.
bool DumpedBeforeIssued(const std::vector<int>& missing,
                        const std::map<int, const CommTraceEntry*>& issued,
                        const std::map<int, CommTraceDump>& dumps) {
  for (const auto& [rank, entry] : issued) {
    if (entry->state == "completed") return true;
  }
  int64_t first_issued = std::numeric_limits<int64_t>::max();
  for (const auto& [rank, entry] : issued) {
    if (entry->created_ns == 0) return false;
    first_issued = std::min(first_issued, entry->created_ns);
  }
  return std::all_of(missing.begin(), missing.end(), [&](int member) {
    const std::optional<int64_t>& dumped = dumps.at(member).dumped_ns;
    return dumped.has_value() && *dumped < first_issued;
  });
}

// The members that issued a collective no member completed only after the first issuer's timeout
// had passed (stopped, as by SIGSTOP, and continued): it failed for the others before they came,
// though every dump records it. Empty when times or the timeout are unrecorded; `detail` says how
// late.
std::vector<int> LateIssuers(const std::map<int, const CommTraceEntry*>& issued,
                             std::string* detail) {
  const CommTraceEntry* first = nullptr;
  int first_rank = 0;
  for (const auto& [rank, entry] : issued) {
    if (entry->state == "completed" || entry->created_ns == 0) return {};
    if (first == nullptr || entry->created_ns < first->created_ns) {
      first = entry;
      first_rank = rank;
    }
  }
  if (first == nullptr || first->timeout_ms <= 0) return {};
  const int64_t deadline_ns = first->created_ns + first->timeout_ms * 1000000;
  std::vector<int> late;
  int64_t latest_ns = 0;
  for (const auto& [rank, entry] : issued) {
    if (entry->created_ns <= deadline_ns) continue;
    late.push_back(rank);
    latest_ns = std::max(latest_ns, entry->created_ns);
  }
  if (!late.empty()) {
    *detail = absl::StrFormat(
        "ranks %s issued it %s%.1f s after rank %d, past rank %d's %.1f s timeout: they came after "
        "the others had given up (stalled before it: stopped, as by SIGSTOP, or stuck)",
        absl::StrJoin(late, ","), late.size() > 1 ? "up to " : "",
        (latest_ns - first->created_ns) / 1e9, first_rank, first_rank, first->timeout_ms / 1e3);
  }
  return late;
}

// The members whose dump, written past their own timeout for the collective `issued` records,
// still shows it not completed: it timed out there though every member had issued it.
std::vector<int> OpenPastTimeout(const std::map<int, const CommTraceEntry*>& issued,
                                 const std::map<int, CommTraceDump>& dumps) {
  std::vector<int> open;
  for (const auto& [rank, entry] : issued) {
    const std::optional<int64_t>& dumped = dumps.at(rank).dumped_ns;
    if (entry->state == "completed") return {};
    if (entry->created_ns == 0 || entry->timeout_ms <= 0 || !dumped.has_value()) continue;
    if (*dumped > entry->created_ns + entry->timeout_ms * 1000000) open.push_back(rank);
  }
  return open;
}

}  // namespace

absl::StatusOr<CommTraceVerdict> AnalyzeCommTraces(const std::string& folder,
                                                   const std::string& prefix) {
  std::map<int, CommTraceDump> dumps;
  std::map<int, std::string> paths;
  absl::StatusOr<std::vector<std::string>> files = ListDirectory(folder);
  if (!files.ok()) return absl::NotFoundError(files.status().message());
  for (const std::string& file : *files) {
    absl::string_view name = file;
    int rank = 0;
    if (!absl::ConsumePrefix(&name, prefix) || !absl::SimpleAtoi(name, &rank)) continue;
    paths[rank] = JoinPath(folder, file);
    TITAN_ASSIGN_OR_RETURN(dumps[rank], ReadCommTraceDump(paths[rank]));
  }
  if (dumps.empty()) {
    return absl::NotFoundError(absl::StrCat(folder, ": no dumps named ", prefix, "<rank>"));
  }
  int world_size = 0;
  for (const auto& [rank, dump] : dumps) {
    for (const auto& [name, ranks] : dump.group_ranks) {
      for (int member : ranks) world_size = std::max(world_size, member + 1);
    }
  }
  for (const auto& [rank, dump] : dumps) {
    TITAN_RETURN_IF_ERROR(CheckWriter(rank, dump, paths[rank], world_size));
  }
  CommTraceVerdict verdict;
  TITAN_RETURN_IF_ERROR(CheckOneRun(dumps, paths));
  verdict.run_id = dumps.begin()->second.run_id;
  std::map<std::string, std::vector<int>> groups;
  std::map<std::string, int> group_source;  // The first rank whose dump named the group.
  std::set<int> missing_dumps;
  for (const auto& [rank, dump] : dumps) {
    verdict.ranks.push_back(rank);
    for (const auto& [name, ranks] : dump.group_ranks) {
      const auto [known, added] = groups.emplace(name, ranks);
      if (!added && known->second != ranks) {
        const int first = group_source[name];
        return absl::InvalidArgumentError(absl::StrCat(
            paths[first], " and ", paths[rank], " disagree on group ", name, "'s ranks ([",
            absl::StrJoin(known->second, ","), "] vs [", absl::StrJoin(ranks, ","),
            "]): dumps of different jobs; analyse one job's dumps alone"));
      }
      group_source.emplace(name, rank);
      for (int member : ranks) {
        if (dumps.count(member) == 0) missing_dumps.insert(member);
      }
    }
  }
  verdict.missing_dumps.assign(missing_dumps.begin(), missing_dumps.end());

  for (const auto& [name, members] : groups) {
    std::vector<RankProgress> rows;
    for (int member : members) {
      if (dumps.count(member) == 0) continue;
      RankProgress progress{member, name};
      const auto found = dumps[member].collectives.find(name);
      if (found != dumps[member].collectives.end() && !found->second.empty()) {
        const auto& [seq, entry] = *found->second.rbegin();
        progress.last_seq = seq;
        progress.last_op = entry.op;
        progress.last_state = entry.state;
        for (const auto& [issued_seq, issued] : found->second) {
          if (issued.state == "completed") {
            progress.last_completed = issued_seq;
          } else if (progress.first_pending == 0) {
            progress.first_pending = issued_seq;
            progress.first_pending_op = issued.op;
            progress.first_pending_state = issued.state;
          }
        }
      }
      rows.push_back(std::move(progress));
    }
    // Groups no member used (the mesh has many) would only add rows of zeros.
    if (std::any_of(rows.begin(), rows.end(),
                    [](const RankProgress& p) { return p.last_seq > 0; })) {
      verdict.progress.insert(verdict.progress.end(), rows.begin(), rows.end());
      if (std::optional<InconclusiveGroup> unknown = Inconclusive(name, members, dumps, rows)) {
        verdict.inconclusive.push_back(*std::move(unknown));
      }
    }
  }

  for (const auto& [name, members] : groups) {
    // From the first sequence number every member's ring still holds, to the newest any reached.
    int64_t first = 1;
    int64_t last = 0;
    for (int member : members) {
      if (dumps.count(member) == 0) continue;
      const auto found = dumps[member].collectives.find(name);
      if (found == dumps[member].collectives.end() || found->second.empty()) continue;
      first = std::max(first, found->second.begin()->first);
      last = std::max(last, found->second.rbegin()->first);
    }
    for (int64_t seq = first; seq <= last; ++seq) {
      std::map<int, const CommTraceEntry*> issued;
      std::vector<int> missing;
      for (int member : members) {
        if (dumps.count(member) == 0) continue;
        const auto& recorded = dumps[member].collectives;
        const auto of_group = recorded.find(name);
        const auto found = of_group == recorded.end()
                               ? std::map<int64_t, CommTraceEntry>::const_iterator()
                               : of_group->second.find(seq);
        if (of_group == recorded.end() || found == of_group->second.end()) {
          missing.push_back(member);
        } else {
          issued[member] = &found->second;
        }
      }
      if (issued.empty()) continue;
      std::string detail = Disagreement(issued);
      std::vector<int> late;
      if (missing.empty() && detail.empty()) late = LateIssuers(issued, &detail);
      const CommTraceEntry& entry = *issued.begin()->second;
      if (missing.empty() && detail.empty()) {
        // With a member's dump absent the group is inconclusive already, at its oldest open one.
        if (issued.size() != members.size()) continue;
        std::vector<int> open = OpenPastTimeout(issued, dumps);
        if (open.empty()) continue;
        verdict.timed_out.push_back(TimedOutCollective{name, members, seq, entry.op,
                                                       entry.input_sizes, entry.state,
                                                       std::move(open), entry.timeout_ms});
        break;
      }
      if (detail.empty() && DumpedBeforeIssued(missing, issued, dumps)) {
        std::vector<int> issuers;
        for (const auto& [rank, unused] : issued) issuers.push_back(rank);
        verdict.inconclusive.push_back(
            InconclusiveGroup{name, members, missing, true, seq, entry.op, entry.state, issuers});
        break;
      }
      verdict.mismatches.push_back(CollectiveMismatch{
          name, members, seq, entry.op, entry.input_sizes, entry.state, missing, detail, late});
      break;
    }
  }
  return verdict;
}

int CommTraceExitStatus(const CommTraceVerdict& verdict) {
  if (!verdict.mismatches.empty()) return kCommTraceMismatch;
  return verdict.all_clear() ? 0 : kCommTraceInconclusive;
}

std::string FormatCommTraceVerdict(const CommTraceVerdict& verdict) {
  std::string text = absl::StrCat("dumps from ranks ", absl::StrJoin(verdict.ranks, ","), "\n");
  if (!verdict.missing_dumps.empty()) {
    absl::StrAppend(&text, "no dump from ranks ", absl::StrJoin(verdict.missing_dumps, ","), "\n");
  }
  if (verdict.all_clear()) {
    absl::StrAppend(&text, "every group's members issued the same collectives\n");
  }
  for (const CollectiveMismatch& m : verdict.mismatches) {
    absl::StrAppend(&text, "group ", m.group, " (ranks ", absl::StrJoin(m.group_ranks, ","),
                    "): collective #", m.collective_seq, " ", m.op, " (input sizes ", m.input_sizes,
                    ", ", m.state, ")");
    if (!m.missing_ranks.empty()) {
      absl::StrAppend(&text, " never issued by ranks ", absl::StrJoin(m.missing_ranks, ","));
    }
    if (!m.detail.empty()) absl::StrAppend(&text, m.missing_ranks.empty() ? " " : "; ", m.detail);
    absl::StrAppend(&text, "\n");
  }
  for (const InconclusiveGroup& g : verdict.inconclusive) {
    absl::StrAppend(&text, "group ", g.group, " (ranks ", absl::StrJoin(g.group_ranks, ","), "): ");
    if (g.older_dumps) {
      absl::StrAppend(&text, "inconclusive, ranks ", absl::StrJoin(g.missing_dumps, ","),
                      " dumped before ranks ", absl::StrJoin(g.last_ranks, ","),
                      " issued collective #", g.last_seq, " ", g.last_op, " (", g.last_state,
                      "): an older dump (an earlier SIGUSR1?) says nothing of what they did "
                      "after (suspects: stopped or dead since)\n");
      continue;
    }
    absl::StrAppend(&text, "inconclusive, no dump from ranks ", absl::StrJoin(g.missing_dumps, ","),
                    " (suspects: stuck, stopped or dead); ");
    // The oldest collective left open is where the group waits; newer ones queued behind it.
    if (g.stuck_seq > 0) {
      absl::StrAppend(&text, "ranks ", absl::StrJoin(g.stuck_ranks, ","), " wait in collective #",
                      g.stuck_seq, " ", g.stuck_op, " (", g.stuck_state,
                      "), the oldest they did not complete");
      if (g.last_seq != g.stuck_seq) {
        absl::StrAppend(&text, " (newest issued: #", g.last_seq, " ", g.last_op, ")");
      }
      absl::StrAppend(&text, "\n");
      continue;
    }
    absl::StrAppend(&text, "ranks ", absl::StrJoin(g.last_ranks, ","), " last issued collective #",
                    g.last_seq, " ", g.last_op, " (", g.last_state, ")\n");
  }
  for (const TimedOutCollective& t : verdict.timed_out) {
    absl::StrAppendFormat(
        &text,
        "group %s (ranks %s): inconclusive, every member issued collective #%d %s (input sizes "
        "%s, %s) and none completed it: ranks %s dumped it still open past its %.1f s timeout; "
        "no member is missing, so a member stalled inside it (stopped, as by SIGSTOP, or "
        "starved: its peers' failure reports name it, 'ranks stalled while it ran') or the "
        "network or NCCL failed\n",
        t.group, absl::StrJoin(t.group_ranks, ","), t.collective_seq, t.op, t.input_sizes, t.state,
        absl::StrJoin(t.open_ranks, ","), t.timeout_ms / 1e3);
  }
  if (!verdict.missing_dumps.empty() && verdict.mismatches.empty()) {
    absl::StrAppend(&text, "inconclusive: the dumps present agree, but ranks ",
                    absl::StrJoin(verdict.missing_dumps, ","), " left none\n");
  }
  return text;
}

std::string FormatCommTraceProgress(const CommTraceVerdict& verdict) {
  std::set<std::pair<std::string, int>> suspects;
  std::set<std::pair<std::string, int>> late;
  for (const CollectiveMismatch& m : verdict.mismatches) {
    for (int rank : m.missing_ranks) suspects.emplace(m.group, rank);
    for (int rank : m.late_ranks) late.emplace(m.group, rank);
  }
  std::string text = absl::StrFormat("%-44s %5s %8s %-28s %-10s %10s\n", "group", "rank", "last #",
                                     "last op", "state", "completed");
  for (const RankProgress& p : verdict.progress) {
    absl::StrAppendFormat(&text, "%-44s %5d %8d %-28s %-10s %10d%s\n", p.group, p.rank, p.last_seq,
                          p.last_op.empty() ? "-" : p.last_op,
                          p.last_state.empty() ? "-" : p.last_state, p.last_completed,
                          suspects.count({p.group, p.rank}) ? "  <- missing"
                          : late.count({p.group, p.rank})   ? "  <- late"
                                                            : "");
  }
  return text;
}

}  // namespace titan
