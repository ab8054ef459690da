#include "lib/hub/hub_client.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "HF_ENDPOINT"}) {
      unsetenv(name);
    }
    setenv("HOME", ::testing::TempDir().c_str(), 1);
  }
};

std::string TokenOrError(absl::string_view flag_value) {
  absl::StatusOr<std::string> token = FindHubToken(flag_value);
  return token.ok() ? *token : absl::StrCat("error: ", token.status().message());
}

TEST_F(EnvTest, TokenPrecedenceFlagEnvFile) {
  EXPECT_EQ(TokenOrError(""), "");
  const std::string token_file = ::testing::TempDir() + "/token";
  std::ofstream(token_file) << "hf_from_file\n";
  setenv("HF_TOKEN_PATH", token_file.c_str(), 1);
  EXPECT_EQ(TokenOrError(""), "hf_from_file");
  setenv("HF_TOKEN", "hf_from_env", 1);
  EXPECT_EQ(TokenOrError(""), "hf_from_env");
  EXPECT_EQ(TokenOrError("hf_from_flag"), "hf_from_flag");
}

// A line break in the token would add headers of the sender's choosing to every Hub request.
TEST_F(EnvTest, TokenWithLineBreakOrSpaceIsRefusedWithoutPrintingIt) {
  const std::string token_file = ::testing::TempDir() + "/bad_token";
  std::ofstream(token_file) << "hf_SECRETA\r\nX-Evil: 1\n";
  setenv("HF_TOKEN_PATH", token_file.c_str(), 1);
  EXPECT_EQ(TokenOrError(""),
            absl::StrCat("error: ", token_file,
                         ": the Hub token has whitespace, a control character or a non-ASCII byte "
                         "at byte 11; expected one word of printable ASCII characters"));
  setenv("HF_TOKEN", "hf_SECRETB\tx", 1);
  const std::string from_env = TokenOrError("");
  EXPECT_THAT(from_env, HasSubstr("error: $HF_TOKEN: the Hub token has whitespace"));
  const std::string from_flag = TokenOrError("hf_SECRETC\r\nX-Evil: 1");
  EXPECT_THAT(from_flag, HasSubstr("error: --hf_token: the Hub token has whitespace"));
  const std::string with_space = TokenOrError("hf_SECRETD x");
  EXPECT_THAT(with_space, HasSubstr("at byte 11"));
  // A no-break space (U+00A0, bytes C2 A0) is whitespace that isascii/isspace do not see.
  const std::string with_nbsp = TokenOrError("\xc2\xa0hf_SECRETE");
  EXPECT_THAT(with_nbsp, HasSubstr("non-ASCII byte at byte 1;"));
  for (const std::string& error : {from_env, from_flag, with_space, with_nbsp}) {
    EXPECT_THAT(error, Not(HasSubstr("SECRET")));
    EXPECT_THAT(error, Not(HasSubstr("Evil")));
  }
}

TEST_F(EnvTest, TokenFileUnderHfHome) {
  const std::string home = ::testing::TempDir() + "/hf_home";
  ASSERT_EQ(system(("mkdir -p " + home).c_str()), 0);
  std::ofstream(home + "/token") << "  hf_home_token \n";
  setenv("HF_HOME", home.c_str(), 1);
  EXPECT_EQ(TokenOrError(""), "hf_home_token");
}

TEST_F(EnvTest, EndpointFromEnv) {
  EXPECT_EQ(HubEndpointFromEnv().value(), "https://huggingface.co");
  setenv("HF_ENDPOINT", "http://mirror.local:8080//", 1);
  EXPECT_EQ(HubEndpointFromEnv().value(), "http://mirror.local:8080");
  setenv("HF_ENDPOINT", "HTTPS://mirror.local", 1);
  EXPECT_EQ(HubEndpointFromEnv().value(), "HTTPS://mirror.local");
}

TEST_F(EnvTest, EndpointWithoutSchemeIsRefused) {
  // No URL would share its origin: the token would never be sent.
  setenv("HF_ENDPOINT", "127.0.0.1:18093", 1);
  EXPECT_EQ(HubEndpointFromEnv().status().message(),
            "$HF_ENDPOINT: expected a URL starting with http:// or https:// (as "
            "https://huggingface.co), got \"127.0.0.1:18093\"");
  setenv("HF_ENDPOINT", "alice:S3cret@mirror.local", 1);
  EXPECT_THAT(std::string(HubEndpointFromEnv().status().message()), HasSubstr("got \"***@mirror"));
  setenv("HF_ENDPOINT", "ftp://alice:S3cret@mirror.local", 1);
  EXPECT_THAT(std::string(HubEndpointFromEnv().status().message()),
              HasSubstr("got \"ftp://***@mirror.local\""));
}

TEST(DownloadAssetsTest, OfflineWithoutListingSaysWhatToDo) {
  DownloadOptions options;
  options.repo_id = "org/name";
  options.local_dir = ::testing::TempDir() + "/offline";
  options.offline = true;
  options.progress_out = nullptr;
  options.selection.config = true;
  const DownloadReport report = DownloadAssets(options);
  EXPECT_EQ(report.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(report.status.message()),
              HasSubstr("no saved listing of org/name@main"));
  EXPECT_THAT(DownloadReportJson(report), HasSubstr("\"status\": \"error\""));
  struct stat st;
  EXPECT_NE(::stat(options.local_dir.c_str(), &st), 0);  // no folder, no lock file left behind
}

TEST(DownloadAssetsTest, RefusesBadRepoIdBeforeTouchingTheNetwork) {
  DownloadOptions options;
  options.repo_id = "../etc";
  options.endpoint = "http://127.0.0.1:9";
  options.local_dir = ::testing::TempDir() + "/bad";
  options.progress_out = nullptr;
  EXPECT_EQ(DownloadAssets(options).status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(DownloadAssetsTest, RefusesHeaderWithLineBreakBeforeSendingIt) {
  DownloadOptions options;
  options.repo_id = "org/name";
  options.endpoint = "http://127.0.0.1:9";
  options.local_dir = ::testing::TempDir() + "/header";
  options.token = "hf_SECRET\r\nX-Evil: 1";
  options.max_retries = 0;
  options.progress_out = nullptr;
  const DownloadReport report = DownloadAssets(options);
  EXPECT_EQ(report.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(report.status.message()),
            "HTTP header Authorization: line break or NUL in its value; not sent");
}

TEST(DownloadAssetsTest, AFailedListingLeavesNoFolderBehind) {
  DownloadOptions options;
  options.repo_id = "org/name";
  options.endpoint = "http://127.0.0.1:9";  // nothing listens
  const std::string parent = ::testing::TempDir() + "/unreachable";
  options.local_dir = parent + "/name";
  options.max_retries = 0;
  options.progress_out = nullptr;
  options.selection.config = true;
  const DownloadReport report = DownloadAssets(options);
  EXPECT_FALSE(report.status.ok());
  struct stat st;
  EXPECT_NE(::stat(parent.c_str(), &st), 0);  // neither the folders it made nor the lock file
}

TEST(DownloadReportJsonTest, ListsFiles) {
  DownloadReport report;
  report.repo_id = "org/name";
  report.files.push_back(FileReport{"config.json", 12, FileOutcome::kUpToDate});
  report.files.push_back(FileReport{"a.bin", 5, FileOutcome::kFailed, 0, 3, "boom"});
  const std::string json = DownloadReportJson(report);
  EXPECT_THAT(json, HasSubstr("\"status\": \"up_to_date\""));
  EXPECT_THAT(json, HasSubstr("\"error\": \"boom\""));
  EXPECT_THAT(json, HasSubstr("\"status\": \"ok\""));
}

}  // namespace
}  // namespace titan
