#include "lib/hub/http_client.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

HttpResponse Answer(long status, const std::string& retry_after) {
  HttpResponse response;
  response.status = status;
  if (!retry_after.empty()) response.headers["retry-after"] = retry_after;
  return response;
}

TEST(RetryAfterTest, ReadsDelaySecondsOf429And503) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(RetryAfter(Answer(429, "5"), now), absl::Seconds(5));
  EXPECT_EQ(RetryAfter(Answer(503, "120"), now), absl::Seconds(120));
}

TEST(RetryAfterTest, ReadsAnHttpDateFromNow) {
  // 1700000000 is Tue, 14 Nov 2023 22:13:20 GMT.
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(RetryAfter(Answer(429, "Tue, 14 Nov 2023 22:13:50 GMT"), now), absl::Seconds(30));
  EXPECT_EQ(RetryAfter(Answer(429, "Tue, 14 Nov 2023 22:00:00 GMT"), now), absl::ZeroDuration());
}

TEST(RetryAfterTest, ZeroWithoutAUsableHeaderOrForOtherStatuses) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(RetryAfter(Answer(429, ""), now), absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(Answer(429, "soon"), now), absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(Answer(429, "-3"), now), absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(Answer(500, "5"), now), absl::ZeroDuration());
  EXPECT_EQ(RetryAfter(Answer(301, "5"), now), absl::ZeroDuration());
}

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
