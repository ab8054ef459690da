#include "lib/data/data_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "lib/data/data_splits.h"
#include "lib/data/json_document_reader.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

constexpr char kDataFileKinds[] = ".jsonl, .json, .jsonl.gz or .json.gz";

// A name of data titan cannot read (another case, compression or format): a folder holding one is
// refused rather than trained on without it.
bool LooksLikeUnreadableData(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  absl::string_view stem = lower;
  for (absl::string_view compression : {".gz", ".zst", ".zstd", ".bz2", ".xz", ".lz4"}) {
    if (absl::ConsumeSuffix(&stem, compression)) break;
  }
  for (absl::string_view format : {".jsonl", ".json", ".parquet", ".arrow"}) {
    if (absl::EndsWith(stem, format)) return true;
  }
  return false;
}

// A folder by device and inode: the same folder under any name or link.
using FolderId = std::pair<dev_t, ino_t>;

// What a walk of a dataset folder has found so far.
struct FolderWalk {
  std::string root;                  // the dataset folder, as given
  std::vector<FolderId> ancestors;   // the folders being walked, root first
  std::vector<std::string> names;    // ancestors' paths relative to root ("" for root)
  std::vector<std::string> found;    // data files, relative to root
  std::vector<std::string> skipped;  // files that are not data (README.md, LICENSE, ...)
};

// A data file of a dataset folder that stat cannot read (`error`): a link to nothing names its
// target, which is what is missing.
absl::Status UnreadableEntry(const std::string& full, int error, const std::string& root) {
  char target[PATH_MAX];
  const ssize_t length = ::readlink(full.c_str(), target, sizeof(target));
  return absl::InvalidArgumentError(absl::StrCat(
      full, length > 0 ? absl::StrCat(" (a link to ", absl::string_view(target, length), ")") : "",
      ": ", error == ENOENT ? "no such file or directory" : std::strerror(error),
      "; fix it, or move it out of the dataset folder ", root));
}

// Walks `relative` (under walk->root), whose stat is `info`, adding what it holds to `walk`.
absl::Status WalkFolder(const std::string& relative, const struct stat& info, FolderWalk* walk) {
  const std::string folder = JoinPath(walk->root, relative);
  const FolderId id = {info.st_dev, info.st_ino};
  for (size_t i = 0; i < walk->ancestors.size(); ++i) {
    if (walk->ancestors[i] != id) continue;
    // Followed, a link back up would list the folder's files again at every depth.
    const std::string& ancestor = walk->names[i];
    // `folder` need not be the link itself (a link outside the dataset can lead back into it).
    return absl::InvalidArgumentError(absl::StrCat(
        folder, " is ", ancestor.empty() ? walk->root : JoinPath(walk->root, ancestor),
        " again, a folder it is in, reached through a link on that path (a loop); remove that "
        "link, or move it out of the dataset folder ",
        walk->root));
  }
  absl::StatusOr<std::vector<std::string>> entries = ListDirectory(folder);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(walk->root, ": listing failed: ", entries.status().message()));
  }
  walk->ancestors.push_back(id);
  walk->names.push_back(relative);
  for (const std::string& name : *entries) {
    // Hidden names (.git, .ipynb_checkpoints, macOS ._* files) are not data: skipped with what
    // they hold, as Hugging Face datasets does.
    if (absl::StartsWith(name, ".")) continue;
    const std::string entry = JoinPath(relative, name);
    const std::string full = JoinPath(walk->root, entry);
    struct stat entry_info;
    const bool exists = ::stat(full.c_str(), &entry_info) == 0;  // follows links, as HF does
    const int stat_errno = exists ? 0 : errno;
    if (exists && S_ISDIR(entry_info.st_mode)) {
      // Folders named "__*" (__pycache__) are not data either, as Hugging Face datasets skips them.
      if (absl::StartsWith(name, "__")) continue;
      absl::Status status = WalkFolder(entry, entry_info, walk);
      if (!status.ok()) return status;
      continue;
    }
    const bool regular = exists && S_ISREG(entry_info.st_mode);
    if (IsJsonDataFile(name) && regular) {
      walk->found.push_back(entry);
    } else if (IsJsonDataFile(name) || LooksLikeUnreadableData(name)) {
      if (!exists) return UnreadableEntry(full, stat_errno, walk->root);
      return absl::InvalidArgumentError(absl::StrCat(
          full,
          regular ? absl::StrCat(": titan reads only ", kDataFileKinds, " files (lower case)")
                  : std::string(": not a regular file"),
          "; convert it, or move it out of the dataset folder ", walk->root));
    } else {
      walk->skipped.push_back(entry);
    }
  }
  walk->ancestors.pop_back();
  walk->names.pop_back();
  return absl::OkStatus();
}

// Of a folder's data files `found` (relative, sorted), those of split `wanted` by Hugging Face
// datasets' file naming (InferDataSplits), or all of them where no name marks a split; sets
// `*split` to the split read ("" for all).
absl::StatusOr<std::vector<std::string>> SelectSplit(const std::string& path,
                                                     std::vector<std::string> found,
                                                     const std::string& wanted,
                                                     std::string* split) {
  absl::StatusOr<std::vector<DataSplit>> inferred = InferDataSplits(found);
  if (!inferred.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", inferred.status().message()));
  }
  const std::vector<DataSplit>& splits = *inferred;
  if (splits.empty()) {
    LOG(INFO) << path << ": no file or folder names a split (train, validation, ...): reading all "
              << found.size() << " data files";
    split->clear();
    return found;
  }
  std::vector<std::string> names;
  for (const DataSplit& candidate : splits) {
    if (candidate.name != wanted) {
      names.push_back(absl::StrCat(candidate.name, " (", candidate.files.size(),
                                   candidate.files.size() == 1 ? " file)" : " files)"));
      continue;
    }
    LOG(INFO) << path << ": reading its \"" << wanted << "\" split, " << candidate.files.size()
              << " of its " << found.size() << " data files ("
              << absl::StrJoin(
                     candidate.files.begin(),
                     candidate.files.begin() + std::min<size_t>(candidate.files.size(), 5), ", ")
              << (candidate.files.size() > 5 ? ", ..." : "") << ")";
    *split = wanted;
    return candidate.files;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": its file and folder names make the splits ", absl::StrJoin(names, ", "),
      " (Hugging Face datasets' naming) but no \"", wanted, "\" split; name its files so (",
      SplitNamePatterns(wanted), ") or give the file or folder to read"));
}

}  // namespace

absl::Status ListDataFiles(const std::string& path, const std::string& wanted,
                           std::vector<std::string>* files, std::vector<std::string>* names,
                           std::string* split) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (S_ISREG(info.st_mode)) {
    if (!IsJsonDataFile(path)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected a ", kDataFileKinds, " file, or a folder of them"));
    }
    files->push_back(path);
    names->push_back(Basename(path));
    return absl::OkStatus();
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file or a folder"));
  }
  FolderWalk walk;
  walk.root = path;
  absl::Status status = WalkFolder("", info, &walk);
  if (!status.ok()) return status;
  if (walk.found.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no ", kDataFileKinds,
                     " files in this folder (names starting with \".\" are skipped)"));
  }
  // Byte order of the relative paths, as Python's sorted() and Hugging Face datasets read them.
  std::sort(walk.found.begin(), walk.found.end());
  if (!walk.skipped.empty()) {
    std::sort(walk.skipped.begin(), walk.skipped.end());
    const size_t named = std::min<size_t>(walk.skipped.size(), 5);
    LOG(INFO) << path << ": " << walk.found.size() << " data files; " << walk.skipped.size()
              << " other files skipped ("
              << absl::StrJoin(walk.skipped.begin(), walk.skipped.begin() + named, ", ")
              << (named < walk.skipped.size() ? ", ..." : "") << ")";
  }
  absl::StatusOr<std::vector<std::string>> selected =
      SelectSplit(path, std::move(walk.found), wanted, split);
  if (!selected.ok()) return selected.status();
  for (const std::string& name : *selected) {
    files->push_back(JoinPath(path, name));
    names->push_back(name);
  }
  return absl::OkStatus();
}

}  // namespace titan
