#include "tools/common/tool_output.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <streambuf>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

const char* g_tool = "";
int g_failure_code = 1;
// Statuses that answer rather than fail (checkpoint_inspect's "differs"): lost output fails them.
std::vector<int>* g_verdicts = nullptr;
// The first failed write's errno: stdio drops the failed bytes and the errno with them.
int g_write_errno = 0;

void NoteWriteError() {
  if (g_write_errno == 0) g_write_errno = errno;
}

// std::cout's own buffer (stdio's stdout), passed through, noting a failed write's errno.
class ErrnoNotingBuffer : public std::streambuf {
 public:
  explicit ErrnoNotingBuffer(std::streambuf* out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const int_type put = out_->sputc(traits_type::to_char_type(c));
    if (traits_type::eq_int_type(put, traits_type::eof())) NoteWriteError();
    return put;
  }

  std::streamsize xsputn(const char* bytes, std::streamsize count) override {
    const std::streamsize written = out_->sputn(bytes, count);
    if (written < count) NoteWriteError();
    return written;
  }

  int sync() override {
    const int result = out_->pubsync();
    if (result != 0) NoteWriteError();
    return result;
  }

 private:
  std::streambuf* out_;
};

// Flushes std::cout and stdio's stdout; whether a write to stdout has failed.
bool StdoutFailed() {
  std::cout.flush();
  if (std::fflush(stdout) != 0) NoteWriteError();
  return std::ferror(stdout) || std::cout.bad();
}

// "stdout: write failed: <reason>", the reason when the failed write left one.
std::string StdoutWriteFailure() {
  return absl::StrCat("stdout: write failed", g_write_errno != 0 ? ": " : "",
                      g_write_errno != 0 ? std::strerror(g_write_errno) : "");
}

// on_exit's handler: it sees the exit status, so a failing tool keeps its own.
void CheckStdout(int status, void*) {
  if (!StdoutFailed()) return;
  const bool verdict =
      status == 0 || std::find(g_verdicts->begin(), g_verdicts->end(), status) != g_verdicts->end();
  // A reader gone (`| head -1`) from a tool that did its work ends it as SIGPIPE's default would.
  if (verdict && g_write_errno == EPIPE) {
    std::signal(SIGPIPE, SIG_DFL);
    std::raise(SIGPIPE);
  }
  std::fprintf(stderr, "%s: %s\n", g_tool, StdoutWriteFailure().c_str());
  std::_Exit(verdict ? g_failure_code : status);
}

}  // namespace

void CheckStdoutAtExit(const char* tool, int failure_code, std::initializer_list<int> verdicts) {
  g_tool = tool;
  g_failure_code = failure_code;
  g_verdicts = new std::vector<int>(verdicts);
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  static ErrnoNotingBuffer* const buffer = new ErrnoNotingBuffer(std::cout.rdbuf());
  std::cout.rdbuf(buffer);
  on_exit(CheckStdout, nullptr);
}

absl::Status FlushStdout() {
  if (!StdoutFailed()) return absl::OkStatus();
  return absl::DataLossError(StdoutWriteFailure());
}

void PrintJsonError(absl::string_view message) {
  std::cout << JsonText(nlohmann::json{{"error", std::string(message)}}) << "\n";
}

}  // namespace titan
