#include "lib/util/c10_log_filter.h"

#include <iostream>
#include <mutex>
#include <streambuf>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace titan {
namespace {

constexpr absl::string_view kBacktraceStart = "\nException raised from ";
constexpr absl::string_view kFrameLine = "frame #";

thread_local int quiet_c10_warnings = 0;

// c10's logger (LibTorch's, not glog) starts a message with "[<I|W|E|F>MMDD hh:mm:ss".
bool IsC10InfoOrWarning(absl::string_view text) {
  return text.size() > 6 && text[0] == '[' && (text[1] == 'I' || text[1] == 'W') &&
         absl::ascii_isdigit(static_cast<unsigned char>(text[2])) &&
         absl::ascii_isdigit(static_cast<unsigned char>(text[5]));
}

// Passes writes on to std::cerr's own buffer, less backtraces and quieted c10 lines. Stateless
// per write: c10's logger and titan's threads write to std::cerr concurrently.
class C10LogFilter : public std::streambuf {
 public:
  explicit C10LogFilter(std::streambuf* out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    const absl::string_view text(data, static_cast<size_t>(size));
    if (quiet_c10_warnings > 0 && IsC10InfoOrWarning(text)) return size;
    if (!absl::StrContains(text, kBacktraceStart)) return out_->sputn(data, size);
    const std::string kept = WithoutC10Backtraces(text);
    out_->sputn(kept.data(), static_cast<std::streamsize>(kept.size()));
    return size;
  }
  int_type overflow(int_type c) override {
    return traits_type::eq_int_type(c, traits_type::eof())
               ? traits_type::not_eof(c)
               : out_->sputc(traits_type::to_char_type(c));
  }
  int sync() override { return out_->pubsync(); }

 private:
  std::streambuf* const out_;
};

}  // namespace

std::string WithoutC10Backtraces(absl::string_view text) {
  std::string kept;
  while (true) {
    const size_t start = text.find(kBacktraceStart);
    if (start == absl::string_view::npos) break;
    absl::StrAppend(&kept, text.substr(0, start));
    // Past the "Exception raised from" line, then past every "frame #" line after it.
    size_t end = text.find('\n', start + 1);
    while (end != absl::string_view::npos && absl::StartsWith(text.substr(end + 1), kFrameLine)) {
      end = text.find('\n', end + 1);
    }
    if (end == absl::string_view::npos) {
      text = absl::string_view();
      break;
    }
    // The backtrace (what() puts a '\n' before it) ends with its last line's '\n'.
    text = text.substr(end + 1);
  }
  absl::StrAppend(&kept, text);
  return kept;
}

void FilterC10LogOutput() {
  static std::once_flag once;
  std::call_once(once, [] {
    static C10LogFilter* filter = new C10LogFilter(std::cerr.rdbuf());  // outlives every write
    std::cerr.rdbuf(filter);
  });
}

QuietC10Warnings::QuietC10Warnings() { ++quiet_c10_warnings; }

QuietC10Warnings::~QuietC10Warnings() { --quiet_c10_warnings; }

}  // namespace titan
