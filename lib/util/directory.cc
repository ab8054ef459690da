#include "lib/util/directory.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/util/file_util.h"

namespace titan {

bool PathExists(const std::string& path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::optional<int64_t> FileSize(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  return static_cast<int64_t>(info.st_size);
}

absl::Status RenamePath(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoError("rename to " + to, from);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("mkdir", prefix);
    }
    if (slash == std::string::npos) break;
  }
  if (!IsDirectory(path)) {
    // mkdir's own words, "File exists", read as if the folder were there.
    if (PathExists(path)) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, ": is a file, not a folder (mkdir cannot make a folder there)"));
    }
    return ErrnoError("mkdir", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoError("open directory", path);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int read_errno = errno;
  ::closedir(dir);
  if (read_errno != 0) {
    errno = read_errno;
    return ErrnoError("read directory", path);
  }
  return names;
}

absl::Status RemoveTree(const std::string& path) {
  if (!PathExists(path)) return absl::OkStatus();
  // Depth first, physical: children before their directory, links themselves rather than targets.
  auto remove_one = [](const char* entry, const struct stat*, int, struct FTW*) {
    return ::remove(entry) == 0 ? 0 : -1;
  };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return ErrnoError("remove", path);
  }
  return absl::OkStatus();
}

std::optional<int> RankInName(absl::string_view name, absl::string_view prefix,
                              absl::string_view suffix) {
  if (!absl::ConsumePrefix(&name, prefix) || !absl::ConsumeSuffix(&name, suffix)) {
    return std::nullopt;
  }
  int rank = 0;
  // As the writers spell a rank: rank_1.abandoned-x, rank_-1 or rank_01 is no rank's.
  if (absl::SimpleAtoi(name, &rank) && rank >= 0 && absl::StrCat(rank) == name) return rank;
  return std::nullopt;
}

std::vector<int> RanksIn(const std::string& folder, absl::string_view prefix,
                         absl::string_view suffix) {
  std::vector<int> ranks;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
  if (!names.ok()) return ranks;
  for (const std::string& name : *names) {
    if (const std::optional<int> rank = RankInName(name, prefix, suffix)) ranks.push_back(*rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

}  // namespace titan
