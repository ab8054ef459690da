#ifndef TITAN_LIB_HUB_CONTENT_DIGEST_H_
#define TITAN_LIB_HUB_CONTENT_DIGEST_H_

// Checks a downloaded file against the digest the Hub lists for it, fed piece by piece as the
// bytes reach the disk.

#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/hub/hub_api.h"

namespace titan {

// Incremental digest of a file as the Hub states it: sha256 of the content for LFS files, the
// git blob id (sha1 of "blob <size>\0" + content) for the others.
class ContentDigest {
 public:
  explicit ContentDigest(const RemoteFile& file);

  bool enabled() const { return !expected_.empty(); }
  const std::string& expected() const { return expected_; }
  const char* name() const { return git_blob_ ? "git blob sha1" : "sha256"; }
  int64_t bytes() const { return bytes_; }

  // An LFS oid learned from the response when the listing had none.
  void ExpectSha256(const std::string& sha256);
  // Starts over from the first byte.
  void Reset();
  // Feeds the next bytes of the file.
  void Update(absl::string_view data);
  // The digest of the bytes fed so far, lowercase hex.
  std::string Finish();

 private:
  std::string expected_;
  bool git_blob_;
  int64_t size_;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context_;
  int64_t bytes_ = 0;
};

// Feeds the first `length` bytes of `path` to `digest` (a part file left by an earlier run).
absl::Status HashPrefix(const std::string& path, int64_t length, ContentDigest* digest);

}  // namespace titan

#endif  // TITAN_LIB_HUB_CONTENT_DIGEST_H_
