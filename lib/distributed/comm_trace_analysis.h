#ifndef TITAN_LIB_DISTRIBUTED_COMM_TRACE_ANALYSIS_H_
#define TITAN_LIB_DISTRIBUTED_COMM_TRACE_ANALYSIS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace titan {

// The first collective of one process group that its members did not all issue alike, or in time.
struct CollectiveMismatch {
  std::string group;
  std::vector<int> group_ranks;    // Job ranks.
  int64_t collective_seq = 0;      // The group's collective sequence number (from 1).
  std::string op;                  // As recorded, e.g. "nccl:all_reduce".
  std::string input_sizes;         // Where issued, e.g. "[[16]]".
  std::string state;               // Where issued: scheduled, started or completed.
  std::vector<int> missing_ranks;  // Members whose dump lacks it.
  std::string detail;              // How the members that issued it disagree, if they do.
  // Members that issued it, none completing it, after the first issuer's timeout had passed.
  std::vector<int> late_ranks;
};

// How far one rank got in one group, from its dump.
struct RankProgress {
  int rank = 0;
  std::string group;
  int64_t last_seq = 0;  // The newest collective it issued (0: none recorded).
  std::string last_op;   // That collective's operation and state.
  std::string last_state;
  int64_t last_completed = 0;  // The newest collective it recorded as completed (0: none).
  int64_t first_pending = 0;   // The oldest collective it issued but not completed (0: none).
  std::string first_pending_op;
  std::string first_pending_state;
};

// A group some members of which left no dump, or a dump older than a collective the others
// issued (written on an earlier SIGUSR1, say, before the rank died): whether they issued its
// collectives is unknown.
struct InconclusiveGroup {
  std::string group;
  std::vector<int> group_ranks;    // Job ranks.
  std::vector<int> missing_dumps;  // The suspects: stuck, stopped or dead before they could dump.
  bool older_dumps = false;        // missing_dumps left dumps, older than collective #last_seq.
  int64_t last_seq = 0;            // The newest collective the members with a dump issued.
  std::string last_op;             // That collective's operation and state.
  std::string last_state;
  std::vector<int> last_ranks;  // The members with a dump that issued it.
  // Where the group is stuck: the oldest collective a member with a dump issued and did not
  // complete (0: they completed all they issued), and those members.
  int64_t stuck_seq = 0;
  std::string stuck_op;
  std::string stuck_state;
  std::vector<int> stuck_ranks;
};

// A collective every member of a group issued alike and none completed, that a member's dump,
// written past that member's timeout for it, still shows open: a stall no dump tells the cause of.
struct TimedOutCollective {
  std::string group;
  std::vector<int> group_ranks;  // Job ranks.
  int64_t collective_seq = 0;
  std::string op;
  std::string input_sizes;
  std::string state;
  std::vector<int> open_ranks;  // The members whose dump shows it open past their timeout.
  int64_t timeout_ms = 0;       // The first member's.
};

struct CommTraceVerdict {
  std::vector<int> ranks;                      // Whose dumps were read.
  std::string run_id;                          // The job run they came from ("" if unrecorded).
  std::vector<int> missing_dumps;              // Members of a recorded group without a dump.
  std::vector<CollectiveMismatch> mismatches;  // At most one per group.
  std::vector<InconclusiveGroup> inconclusive;  // Groups some member used, with missing_dumps.
  std::vector<RankProgress> progress;           // By group, then rank; groups some member used.
  std::vector<TimedOutCollective> timed_out;    // At most one per group, without a mismatch.

  // The members agree as far as anyone can tell: no mismatch, no missing or older dump, and no
  // collective that timed out.
  bool all_clear() const {
    return mismatches.empty() && missing_dumps.empty() && inconclusive.empty() && timed_out.empty();
  }
};

// Reads one job's flight-recorder dumps (<folder>/<prefix><rank>: what CommTrace, and c10d's
// ProcessGroupNCCL, write) and finds, per process group, the first collective that not every
// member issued, or that members issued with different operations, sizes or dtypes, or that none
// completed and some issued only after the first issuer's timeout: the verdict of
// `python -m torch.distributed.flight_recorder.fr_trace <folder>`, without Python (which compares
// no times, so misses the last). Groups are
// compared from the first sequence number every member's ring buffer still holds; point-to-point
// operations are not matched. Refuses dumps of different runs (their "run_id", which titan
// writes) or that disagree on a group's members: a folder holding an earlier job's files; and a
// dump under another rank's file name (its "rank", which titan writes, or else its groups, say);
// and collectives of a group its pg_config does not list with ranks (c10d's Gloo dumps).
absl::StatusOr<CommTraceVerdict> AnalyzeCommTraces(const std::string& folder,
                                                   const std::string& prefix = "rank_");

// One line per finding, e.g. `group gloo:dp_shard/0 (ranks 0,1,2,3): collective #7
// nccl:all_reduce (input sizes [[16]], scheduled) never issued by ranks 2`; a group with a
// member's dump missing is inconclusive, never said to agree.
std::string FormatCommTraceVerdict(const CommTraceVerdict& verdict);

// The analyzing tools' exit statuses for a verdict, apart from 0 (all clear) and 1 (a failure).
constexpr int kCommTraceMismatch = 2;
constexpr int kCommTraceInconclusive = 3;

// The analyzing tools' exit status for a verdict: 0 all clear, 2 a mismatch, 3 inconclusive.
int CommTraceExitStatus(const CommTraceVerdict& verdict);

// A table of `verdict.progress`: one row per group and rank with its newest collective and its
// newest completed one, rows of ranks named in a mismatch marked.
std::string FormatCommTraceProgress(const CommTraceVerdict& verdict);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_COMM_TRACE_ANALYSIS_H_
