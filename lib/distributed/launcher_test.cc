#include "lib/distributed/launcher.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

// titan_train, titan_rl and profile_run take the flag as torchrun does, in either spelling.
TEST(NprocPerNodeFlagTest, BothSpellingsAndAbsence) {
  auto nproc = [](std::vector<std::string> args) {
    args.insert(args.begin(), "tool");
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    return NprocPerNodeFlag(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_EQ(*nproc({"--job.config_file=a.toml"}), 0);
  EXPECT_EQ(*nproc({"--nproc_per_node=4", "--out=x"}), 4);
  EXPECT_EQ(*nproc({"--out=x", "--nproc_per_node", "2"}), 2);
  EXPECT_EQ(nproc({"--nproc_per_node=0"}).status().message(),
            "--nproc_per_node: expected a positive integer, got \"0\"");
  EXPECT_FALSE(nproc({"--nproc_per_node=two"}).ok());
  EXPECT_EQ(nproc({"--nproc_per_node=2", "--nproc_per_node", "3"}).status().message(),
            "--nproc_per_node given twice (2 and 3): give it once");
  // A bare flag last is refused wherever it stands, not dropped for the ranks unread.
  const std::string bare =
      "--nproc_per_node: expected a rank count after it (or --nproc_per_node=N)";
  EXPECT_EQ(nproc({"--out=x", "--nproc_per_node"}).status().message(), bare);
  EXPECT_EQ(nproc({"--nproc_per_node=2", "--out=x", "--nproc_per_node"}).status().message(), bare);
}

// A typo must not fork processes until the OOM killer fires: 8 ranks per core at most.
TEST(NprocPerNodeFlagTest, MoreRanksThanTheCoresCanRunAreRefused) {
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  auto nproc = [](int n) {
    std::string flag = absl::StrCat("--nproc_per_node=", n);
    char tool[] = "tool";
    char* argv[] = {tool, flag.data()};
    return NprocPerNodeFlag(2, argv);
  };
  EXPECT_EQ(*nproc(8 * cores), 8 * cores);
  const absl::StatusOr<int> refused = nproc(8 * cores + 1);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("--nproc_per_node: expected at most ", 8 * cores,
                         " ranks (8 per CPU core of this machine), got ", 8 * cores + 1));
  EXPECT_FALSE(nproc(100000).ok());
}

}  // namespace
}  // namespace titan
