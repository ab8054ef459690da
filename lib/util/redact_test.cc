#include "lib/util/redact.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(RedactUrlTest, ReplacesUserinfoOnly) {
  EXPECT_EQ(RedactUrl("http://alice:S3cretPass@127.0.0.1:18002/api/models/org/m"),
            "http://***@127.0.0.1:18002/api/models/org/m");
  EXPECT_EQ(RedactUrl("https://hf_token@mirror.example"), "https://***@mirror.example");
  EXPECT_EQ(RedactUrl("https://a:b@c@host/x"), "https://***@host/x");
}

TEST(RedactUrlsInTest, RedactsEveryUrlInText) {
  EXPECT_EQ(
      RedactUrlsIn("no access to http://alice:pw@hub:8080/org/m, see "
                   "'https://tok@mirror/x' or https://plain/y"),
      "no access to http://***@hub:8080/org/m, see 'https://***@mirror/x' or https://plain/y");
  EXPECT_EQ(RedactUrlsIn("http://a:b@h"), "http://***@h");
  EXPECT_EQ(RedactUrlsIn("odd :// and x://u@"), "odd :// and x://***@");
  EXPECT_EQ(RedactUrlsIn("nothing here"), "nothing here");
}

TEST(RedactUrlTest, LeavesUrlsWithoutUserinfoAlone) {
  EXPECT_EQ(RedactUrl("https://huggingface.co/org/m"), "https://huggingface.co/org/m");
  EXPECT_EQ(RedactUrl("https://host/path/with@sign?q=a@b#x@y"),
            "https://host/path/with@sign?q=a@b#x@y");
  EXPECT_EQ(RedactUrl("not a url"), "not a url");
}

}  // namespace
}  // namespace titan
