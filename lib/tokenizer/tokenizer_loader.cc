#include "lib/tokenizer/tokenizer_loader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/tokenizer/hf_tokenizer.h"
#include "lib/tokenizer/tiktoken_tokenizer.h"
#include "lib/util/directory.h"

namespace titan {
namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFile(const std::string& file) {
  if (IsTokenizerJsonName(file)) {
    const size_t slash = file.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : file.substr(0, slash + 1);
    const std::string config = dir + "tokenizer_config.json";
    const std::string map = dir + "special_tokens_map.json";
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> hf =
        LoadHfTokenizer(file, IsRegularFile(config) ? config : "", IsRegularFile(map) ? map : "");
    if (!hf.ok()) return hf.status();
    return std::unique_ptr<Tokenizer>(*std::move(hf));
  }
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tiktoken = LoadTiktokenTokenizer(file);
  if (!tiktoken.ok()) return tiktoken.status();
  return std::unique_ptr<Tokenizer>(*std::move(tiktoken));
}

}  // namespace

bool IsTokenizerJsonName(const std::string& path) { return absl::EndsWith(path, ".json"); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, ": no such tokenizer file or directory"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(info.st_mode)) return LoadFile(path);

  const std::string dir = absl::EndsWith(path, "/") ? path : absl::StrCat(path, "/");
  for (const char* name : {"tokenizer.json", "original/tokenizer.model", "tokenizer.model"}) {
    if (IsRegularFile(dir + name)) return LoadFile(dir + name);
  }
  return absl::NotFoundError(absl::StrCat(
      path, ": no tokenizer.json, original/tokenizer.model or tokenizer.model in this directory"));
}

}  // namespace titan
