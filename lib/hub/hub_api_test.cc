#include "lib/hub/hub_api.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ValidateRemotePathTest, AcceptsNestedNames) {
  EXPECT_TRUE(ValidateRemotePath("config.json").ok());
  EXPECT_TRUE(ValidateRemotePath("original/tokenizer.model").ok());
  EXPECT_TRUE(ValidateRemotePath("a..b/c.json").ok());
}

TEST(ValidateRemotePathTest, RefusesNamesThatLeaveTheFolder) {
  for (const std::string& bad :
       {std::string("../x"), std::string("a/../../x"), std::string("/etc/passwd"),
        std::string("a//b"), std::string("./a"), std::string("a\\b"), std::string(""),
        std::string("a\0b", 3), std::string("a/..")}) {
    const absl::Status status = ValidateRemotePath(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(bad);
    EXPECT_THAT(std::string(status.message()), HasSubstr("refusing remote file name"));
  }
}

TEST(ValidateRepoIdTest, NeedsOrgAndName) {
  EXPECT_TRUE(ValidateRepoId("meta-llama/Llama-3.1-8B").ok());
  EXPECT_FALSE(ValidateRepoId("Llama-3.1-8B").ok());
  EXPECT_FALSE(ValidateRepoId("a/b/c").ok());
  EXPECT_FALSE(ValidateRepoId("../b").ok());
  EXPECT_FALSE(ValidateRepoId("a/b?x=1").ok());
}

TEST(ValidateRepoIdTest, AppliesTheHubsRuleToEachPart) {
  EXPECT_TRUE(ValidateRepoId("Qwen/Qwen2.5-0.5B").ok());
  EXPECT_TRUE(ValidateRepoId("_org/_name_").ok());
  EXPECT_TRUE(ValidateRepoId("org/" + std::string(96, 'n')).ok());
  for (const char* refused : {"foo/.cache", "foo/-bar", ".foo/bar", "-foo/bar", "foo/bar.",
                              "foo/bar-", "foo/a--b", "foo/a..b", "foo/.", "foo/.."}) {
    const absl::Status status = ValidateRepoId(refused);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("neither starting nor ending with '-' or '.', without '--' or '..'"))
        << refused;
  }
  EXPECT_FALSE(ValidateRepoId("org/" + std::string(97, 'n')).ok());
}

TEST(ValidateRevisionTest, RefusesEmpty) {
  EXPECT_TRUE(ValidateRevision("main").ok());
  EXPECT_TRUE(ValidateRevision("refs/pr/1").ok());
  EXPECT_EQ(ValidateRevision("").message(),
            "--revision: expected a branch, tag or commit, got an empty string");
}

TEST(ValidateRevisionTest, RefusesDotSegmentsAndEmptyComponents) {
  EXPECT_TRUE(ValidateRevision("v1.0").ok());
  EXPECT_TRUE(ValidateRevision("release/..x").ok());
  for (const char* refused :
       {".", "..", "../main", "refs/pr/..", "a/./b", "/main", "main/", "a//b"}) {
    EXPECT_EQ(ValidateRevision(refused).message(),
              absl::StrCat("--revision: expected a branch, tag or commit, got \"", refused,
                           "\": a git ref has no empty, \".\" or \"..\" path component"))
        << refused;
  }
}

TEST(ParseRepoInfoTest, ReadsCommitSizesAndDigests) {
  const std::string json = R"({"id": "Org/Model", "sha": "0123456789abcdef0123456789abcdef01234567",
    "siblings": [
      {"rfilename": "config.json", "size": 12, "blobId": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
      {"rfilename": "model.safetensors", "size": 134, "blobId": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
       "lfs": {"sha256": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
               "size": 5000000000, "pointerSize": 134}},
      {"rfilename": "README.md"}]})";
  absl::StatusOr<RepoSnapshot> snapshot = ParseRepoInfo(json, "listing");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->repo_id, "Org/Model");
  EXPECT_EQ(snapshot->commit, "0123456789abcdef0123456789abcdef01234567");
  ASSERT_EQ(snapshot->files.size(), 3u);
  EXPECT_EQ(snapshot->files[0].size, 12);
  EXPECT_EQ(snapshot->files[0].git_sha1, std::string(40, 'a'));
  EXPECT_EQ(snapshot->files[0].sha256, "");
  EXPECT_EQ(snapshot->files[1].size, 5000000000);
  EXPECT_EQ(snapshot->files[1].sha256, std::string(64, 'c'));
  EXPECT_EQ(snapshot->files[1].git_sha1, "");
  EXPECT_EQ(snapshot->files[2].size, -1);
  EXPECT_EQ(ParseRepoInfo(R"({"sha": "x", "siblings": []})", "listing")->repo_id, "");
}

TEST(ParseRepoInfoTest, AnLfsFileIsCheckedByItsSha256OrOidNeverByItsPointersBlobId) {
  const std::string sha256(64, 'c');
  const std::string json = R"({"sha": "x", "siblings": [
      {"rfilename": "oid", "blobId": ")" +
                           std::string(40, 'b') + R"(",
       "lfs": {"oid": ")" + sha256 +
                           R"(", "size": 5}},
      {"rfilename": "pointer_oid", "lfs": {"oid": "sha256:)" +
                           std::string(64, 'C') + R"("}},
      {"rfilename": "no_sha256", "blobId": ")" +
                           std::string(40, 'b') + R"(", "lfs": {"size": 5}},
      {"rfilename": "malformed", "blobId": ")" +
                           std::string(40, 'b') + R"(",
       "lfs": {"sha256": "not hex", "oid": 7}},
      {"rfilename": "short", "lfs": {"sha256": "cccc"}}]})";
  absl::StatusOr<RepoSnapshot> snapshot = ParseRepoInfo(json, "listing");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->files.size(), 5u);
  EXPECT_EQ(snapshot->files[0].sha256, sha256);
  EXPECT_EQ(snapshot->files[0].size, 5);
  EXPECT_EQ(snapshot->files[1].sha256, sha256);
  for (const RemoteFile& file : snapshot->files) {
    // The blobId of an LFS entry is its pointer's: the content would never match it.
    EXPECT_EQ(file.git_sha1, "") << file.path;
    if (file.path != "oid" && file.path != "pointer_oid") {
      EXPECT_EQ(file.sha256, "") << file.path;
    }
  }
}

TEST(ParseRepoInfoTest, RefusesUnsafeNamesAndBadShapes) {
  absl::StatusOr<RepoSnapshot> unsafe =
      ParseRepoInfo(R"({"sha": "x", "siblings": [{"rfilename": "../../.bashrc"}]})", "listing");
  EXPECT_EQ(unsafe.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(unsafe.status().message()), HasSubstr("../../.bashrc"));
  absl::StatusOr<RepoSnapshot> twice = ParseRepoInfo(
      R"({"sha": "x", "siblings": [{"rfilename": "a/b.bin"}, {"rfilename": "c"},
                                   {"rfilename": "a/b.bin"}]})",
      "listing");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(twice.status().message(),
            "listing: refusing remote file name \"a/b.bin\": listed twice");
  EXPECT_THAT(std::string(ParseRepoInfo("[1]", "listing").status().message()),
              HasSubstr("listing: expected a JSON object"));
  EXPECT_THAT(std::string(ParseRepoInfo(R"({"sha": "x"})", "listing").status().message()),
              HasSubstr("\"siblings\""));
  EXPECT_FALSE(ParseRepoInfo("{not json", "listing").ok());
}

TEST(UrlTest, BuildsApiAndResolveUrls) {
  EXPECT_EQ(RepoInfoUrl("https://hub.example/", "org/name", "refs/pr/1"),
            "https://hub.example/api/models/org/name/revision/refs%2Fpr%2F1?blobs=true");
  EXPECT_EQ(ResolveUrl("https://hub.example", "org/name", "main", "original/a b#.model"),
            "https://hub.example/org/name/resolve/main/original/a%20b%23.model");
}

TEST(SameOriginTest, ComparesSchemeHostAndPort) {
  EXPECT_TRUE(SameOrigin("https://huggingface.co/a", "https://huggingface.co:443/b?c"));
  EXPECT_TRUE(SameOrigin("http://127.0.0.1:8000/x", "http://127.0.0.1:8000"));
  EXPECT_FALSE(SameOrigin("http://127.0.0.1:8000/x", "http://localhost:8000/x"));
  EXPECT_FALSE(SameOrigin("http://127.0.0.1:8000/x", "http://127.0.0.1:8001/x"));
  EXPECT_FALSE(SameOrigin("https://huggingface.co/x", "http://huggingface.co/x"));
  EXPECT_FALSE(SameOrigin("https://huggingface.co/x", "https://cdn-lfs.huggingface.co/x"));
  EXPECT_FALSE(SameOrigin("not a url", "not a url"));
}

TEST(HubHttpErrorTest, SaysWhatToDo) {
  HubRequestContext context{"https://huggingface.co", "meta-llama/Llama-3.1-8B", "main",
                            "config.json", false};
  const absl::Status gated = HubHttpError(401, "GatedRepo", "", context);
  EXPECT_EQ(gated.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(gated.message()),
              HasSubstr("request access at https://huggingface.co/meta-llama/Llama-3.1-8B and "
                        "pass --hf_token"));
  EXPECT_THAT(std::string(HubHttpError(404, "EntryNotFound", "", context).message()),
              HasSubstr("file \"config.json\" not found at revision main"));
  context.revision = "v9";
  EXPECT_THAT(std::string(HubHttpError(404, "RevisionNotFound", "", context).message()),
              HasSubstr("revision \"v9\" not found in meta-llama/Llama-3.1-8B"));
  context.path = "";
  EXPECT_THAT(std::string(HubHttpError(404, "RepoNotFound", "", context).message()),
              HasSubstr("repository \"meta-llama/Llama-3.1-8B\" not found"));
  EXPECT_EQ(HubHttpError(503, "", "", context).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HubHttpError(400, "", "", context).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HubHttpErrorTest, NeverShowsTheEndpointsCredentials) {
  const HubRequestContext context{"http://alice:S3cretPass@hub.example:8080/", "org/m", "main", "",
                                  false};
  for (const auto& [status, code] :
       std::vector<std::pair<long, std::string>>{{401, "GatedRepo"}, {404, ""}, {503, ""}}) {
    // The Hub's own message may quote the URL it was asked for.
    const std::string message(
        HubHttpError(status, code, "no http://alice:S3cretPass@hub.example:8080/org/m", context)
            .message());
    EXPECT_THAT(message, HasSubstr("http://***@hub.example:8080")) << status;
    EXPECT_THAT(message, Not(HasSubstr("S3cretPass"))) << status;
    EXPECT_THAT(message, Not(HasSubstr("alice"))) << status;
  }
}

// A server (a mirror, a proxy) may echo the token it was sent.
TEST(HubHttpErrorTest, NeverShowsATokenTheServerEchoes) {
  const HubRequestContext context{"https://hub.example", "org/m", "main", "", true};
  const std::string message(
      HubHttpError(401, "", "bad header Authorization: Bearer hf_0123456789abcdef", context)
          .message());
  EXPECT_THAT(message, HasSubstr("(Hub says: bad header Authorization: Bearer ***)"));
  EXPECT_THAT(message, Not(HasSubstr("hf_0123456789abcdef")));
}

TEST(IsRetryableHttpStatusTest, ServerErrorsAndThrottling) {
  EXPECT_TRUE(IsRetryableHttpStatus(500));
  EXPECT_TRUE(IsRetryableHttpStatus(503));
  EXPECT_TRUE(IsRetryableHttpStatus(429));
  EXPECT_FALSE(IsRetryableHttpStatus(404));
  EXPECT_FALSE(IsRetryableHttpStatus(403));
}

}  // namespace
}  // namespace titan
