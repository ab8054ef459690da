#include "lib/hub/content_digest.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

constexpr char kAbcSha256[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
// `printf 'hello\n' | git hash-object --stdin`
constexpr char kHelloBlobSha1[] = "ce013625030ba8dba906f756967f9e9ca394464a";

TEST(ContentDigestTest, Sha256OfLfsFileFedInPieces) {
  ContentDigest digest(RemoteFile{"model.bin", 3, kAbcSha256, "ignored"});
  EXPECT_STREQ(digest.name(), "sha256");
  digest.Update("a");
  digest.Update("bc");
  EXPECT_EQ(digest.bytes(), 3);
  EXPECT_EQ(digest.Finish(), kAbcSha256);
}

TEST(ContentDigestTest, GitBlobSha1WithoutLfsOid) {
  ContentDigest digest(RemoteFile{"config.json", 6, "", kHelloBlobSha1});
  EXPECT_STREQ(digest.name(), "git blob sha1");
  digest.Update("hello\n");
  EXPECT_EQ(digest.Finish(), kHelloBlobSha1);
}

TEST(ContentDigestTest, ResetStartsOverAndExpectSha256Switches) {
  ContentDigest digest(RemoteFile{"a", 3, "", kHelloBlobSha1});
  digest.Update("xyz");
  digest.ExpectSha256(kAbcSha256);
  EXPECT_EQ(digest.bytes(), 0);
  EXPECT_EQ(digest.expected(), kAbcSha256);
  digest.Update("abc");
  EXPECT_EQ(digest.Finish(), kAbcSha256);
}

TEST(ContentDigestTest, DisabledWithoutAnExpectedDigestStillCounts) {
  ContentDigest digest(RemoteFile{"a", 3});
  EXPECT_FALSE(digest.enabled());
  digest.Update("abc");
  EXPECT_EQ(digest.bytes(), 3);
}

TEST(HashPrefixTest, HashesOnlyThePrefixAndRefusesAShortFile) {
  const std::string path = ::testing::TempDir() + "/part";
  std::ofstream(path) << "abcdef";
  ContentDigest digest(RemoteFile{"a", 3, kAbcSha256});
  ASSERT_TRUE(HashPrefix(path, 3, &digest).ok());
  EXPECT_EQ(digest.Finish(), kAbcSha256);

  ContentDigest longer(RemoteFile{"a", 10, kAbcSha256});
  const absl::Status status = HashPrefix(path, 10, &longer);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), HasSubstr("shorter than 10 bytes"));
}

}  // namespace
}  // namespace titan
