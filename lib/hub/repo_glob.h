#ifndef TITAN_LIB_HUB_REPO_GLOB_H_
#define TITAN_LIB_HUB_REPO_GLOB_H_

// --include/--exclude globs over repo paths, matched as huggingface_hub's filter_repo_objects
// does: Python's fnmatch (case-sensitive; `*` crosses `/`; only `[!...]` negates; no escapes).

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/util/pcre2_code.h"

namespace titan {

// Python's fnmatch.translate(glob) as a PCRE2 pattern for PCRE2_UTF (which refuses it where
// `glob` is not UTF-8).
std::string FnmatchToPcre2(absl::string_view glob);

class RepoGlob {
 public:
  // As filter_repo_objects: `\` reads as `/`, and a glob ending in `/` gets a `*` (a folder's
  // files). Errors name the glob, C-escaped; a glob that is not UTF-8 is refused with the byte
  // offset of its first bad character in the glob as given (as "at byte offset 3 of the glob").
  static absl::StatusOr<RepoGlob> Compile(absl::string_view glob);

  // Whether the whole of `path` matches.
  bool Matches(absl::string_view path) const;

 private:
  explicit RepoGlob(Pcre2Code code) : code_(std::move(code)) {}

  Pcre2Code code_;
};

}  // namespace titan

#endif  // TITAN_LIB_HUB_REPO_GLOB_H_
