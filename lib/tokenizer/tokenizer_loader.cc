#include "lib/tokenizer/tokenizer_loader.h"

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/tokenizer/hf_tokenizer.h"
#include "lib/tokenizer/tiktoken_tokenizer.h"

namespace titan {
namespace {

bool IsRegularFile(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFile(const std::filesystem::path& file) {
  if (absl::EndsWith(file.filename().string(), ".json")) {
    const std::filesystem::path config = file.parent_path() / "tokenizer_config.json";
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> hf =
        LoadHfTokenizer(file.string(), IsRegularFile(config) ? config.string() : "");
    if (!hf.ok()) return hf.status();
    return std::unique_ptr<Tokenizer>(*std::move(hf));
  }
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tiktoken = LoadTiktokenTokenizer(file.string());
  if (!tiktoken.ok()) return tiktoken.status();
  return std::unique_ptr<Tokenizer>(*std::move(tiktoken));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(path, ": no such tokenizer file or directory"));
  }
  if (error) return absl::InvalidArgumentError(absl::StrCat(path, ": ", error.message()));
  if (!std::filesystem::is_directory(status)) return LoadFile(path);

  const std::filesystem::path dir(path);
  for (const char* name : {"tokenizer.json", "original/tokenizer.model", "tokenizer.model"}) {
    if (IsRegularFile(dir / name)) return LoadFile(dir / name);
  }
  return absl::NotFoundError(absl::StrCat(
      path, ": no tokenizer.json, original/tokenizer.model or tokenizer.model in this directory"));
}

}  // namespace titan
