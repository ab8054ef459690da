#ifndef TITAN_LIB_HUB_HTTP_CLIENT_H_
#define TITAN_LIB_HUB_HTTP_CLIENT_H_

// A thin libcurl wrapper: one GET at a time, redirects returned to the caller (who decides where
// credentials may go), 2xx bodies streamed to a callback.

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

typedef void CURL;

namespace titan {

struct HttpResponse {
  long status = 0;
  absl::flat_hash_map<std::string, std::string> headers;  // lower-case names
  std::string body;          // the body of a non-2xx response, truncated to 64 KiB
  std::string redirect_url;  // absolute target of a 3xx response
};

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  absl::Duration connect_timeout = absl::Seconds(30);
  // A transfer slower than 1 KiB/s for this long is abandoned as stalled.
  absl::Duration stall_timeout = absl::Seconds(30);
  // Called when a 2xx response's headers are in; an error aborts the transfer and is returned.
  std::function<absl::Status(const HttpResponse&)> on_headers;
  // Receives a 2xx body piece by piece; an error aborts the transfer and is returned. When unset,
  // the body is kept in HttpResponse::body.
  std::function<absl::Status(absl::string_view)> on_body;
};

// How long a 429 or 503 response asks to be left alone: its Retry-After header as delta-seconds
// or an HTTP-date (counted from `now`). Zero for other statuses, no header or one that does not
// parse.
absl::Duration RetryAfter(const HttpResponse& response, absl::Time now);

// One connection cache per client: use one client per thread.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs one GET without following redirects. Any HTTP status is a response; network failures
  // are kUnavailable (reset, refused, cut short) or kDeadlineExceeded (stalled, timed out), both
  // worth retrying; callback errors come back as they were.
  absl::StatusOr<HttpResponse> Get(const HttpRequest& request);

 private:
  CURL* curl_;
};

}  // namespace titan

#endif  // TITAN_LIB_HUB_HTTP_CLIENT_H_
