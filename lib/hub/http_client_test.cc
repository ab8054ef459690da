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

}  // namespace
}  // namespace titan
