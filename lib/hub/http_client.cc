#include "lib/hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/util/redact.h"

namespace titan {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

struct Transfer {
  CURL* curl;
  const HttpRequest* request;
  HttpResponse response;
  bool success = false;  // the response is 2xx
  absl::Status callback_status;
};

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const absl::string_view line(data, size * count);
  if (absl::StartsWith(line, "HTTP/")) {
    transfer->response.headers.clear();
    return line.size();
  }
  const absl::string_view stripped = absl::StripAsciiWhitespace(line);
  if (stripped.empty()) {  // end of headers
    curl_easy_getinfo(transfer->curl, CURLINFO_RESPONSE_CODE, &transfer->response.status);
    transfer->success = transfer->response.status >= 200 && transfer->response.status < 300;
    if (transfer->success && transfer->request->on_headers) {
      transfer->callback_status = transfer->request->on_headers(transfer->response);
      if (!transfer->callback_status.ok()) return 0;
    }
    return line.size();
  }
  const size_t colon = stripped.find(':');
  if (colon != absl::string_view::npos) {
    transfer->response.headers[absl::AsciiStrToLower(stripped.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(stripped.substr(colon + 1)));
  }
  return line.size();
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const absl::string_view piece(data, size * count);
  if (transfer->success && transfer->request->on_body) {
    transfer->callback_status = transfer->request->on_body(piece);
    return transfer->callback_status.ok() ? piece.size() : 0;
  }
  std::string& body = transfer->response.body;
  const bool bounded = !transfer->success;
  const size_t keep =
      bounded ? std::min(piece.size(), kMaxErrorBody - std::min(kMaxErrorBody, body.size()))
              : piece.size();
  body.append(piece.data(), keep);
  return piece.size();
}

}  // namespace

absl::Duration RetryAfter(const HttpResponse& response, absl::Time now) {
  if (response.status != 429 && response.status != 503) return absl::ZeroDuration();
  const auto header = response.headers.find("retry-after");
  if (header == response.headers.end()) return absl::ZeroDuration();
  int64_t seconds = 0;
  if (absl::SimpleAtoi(header->second, &seconds))
    return absl::Seconds(std::max<int64_t>(0, seconds));
  const time_t date = curl_getdate(header->second.c_str(), nullptr);
  if (date < 0) return absl::ZeroDuration();
  return std::max(absl::ZeroDuration(), absl::FromTimeT(date) - now);
}

HttpClient::HttpClient() {
  static std::once_flag init_once;
  std::call_once(init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(curl_); }

absl::StatusOr<HttpResponse> HttpClient::Get(const HttpRequest& request) {
  if (curl_ == nullptr) return absl::InternalError("libcurl: curl_easy_init failed");
  Transfer transfer{curl_, &request};
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr,
                                                                      &curl_slist_free_all);
  for (const std::string& header : request.headers) {
    if (header.find_first_of("\r\n\0", 0, 3) != std::string::npos) {  // would inject more headers
      return absl::InvalidArgumentError(
          absl::StrCat("HTTP header ", header.substr(0, header.find_first_of(":\r\n")),
                       ": line break or NUL in its value; not sent"));
    }
    headers.reset(curl_slist_append(headers.release(), header.c_str()));
  }
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_easy_reset(curl_);
  curl_easy_setopt(curl_, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl_, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl_, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl_, CURLOPT_USERAGENT, "titan-download_assets/1.0");
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl_, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl_, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(request.connect_timeout)));
  curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(absl::ToInt64Seconds(request.stall_timeout))));
  curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_buffer);
  const CURLcode code = curl_easy_perform(curl_);
  if (!transfer.callback_status.ok()) return transfer.callback_status;
  if (code != CURLE_OK) {
    const std::string message =
        absl::StrCat(RedactUrl(request.url.substr(0, request.url.find('?'))), ": ",
                     error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code));
    if (code == CURLE_OPERATION_TIMEDOUT) return absl::DeadlineExceededError(message);
    if (code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL) {
      return absl::InvalidArgumentError(message);
    }
    return absl::UnavailableError(message);
  }
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &transfer.response.status);
  if (transfer.response.status >= 300 && transfer.response.status < 400) {
    char* location = nullptr;
    curl_easy_getinfo(curl_, CURLINFO_REDIRECT_URL, &location);
    if (location != nullptr) transfer.response.redirect_url = location;
  }
  return std::move(transfer.response);
}

}  // namespace titan
