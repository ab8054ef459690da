#include "lib/distributed/launcher.h"

#include <string>
#include <vector>

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
}

}  // namespace
}  // namespace titan
