#include "lib/hub/content_digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/util/file_util.h"

namespace titan {

ContentDigest::ContentDigest(const RemoteFile& file)
    : expected_(file.sha256.empty() ? file.git_sha1 : file.sha256),
      git_blob_(file.sha256.empty() && !file.git_sha1.empty()),
      size_(file.size),
      context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
  Reset();
}

void ContentDigest::ExpectSha256(const std::string& sha256) {
  expected_ = sha256;
  git_blob_ = false;
  Reset();
}

void ContentDigest::Reset() {
  bytes_ = 0;
  if (!enabled()) return;
  EVP_DigestInit_ex(context_.get(), git_blob_ ? EVP_sha1() : EVP_sha256(), nullptr);
  if (git_blob_) {
    const std::string header = absl::StrCat("blob ", size_);
    EVP_DigestUpdate(context_.get(), header.c_str(), header.size() + 1);  // with its NUL
  }
}

void ContentDigest::Update(absl::string_view data) {
  bytes_ += static_cast<int64_t>(data.size());
  if (enabled()) EVP_DigestUpdate(context_.get(), data.data(), data.size());
}

std::string ContentDigest::Finish() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_.get(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

absl::Status HashPrefix(const std::string& path, int64_t length, ContentDigest* digest) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return ErrnoError("open", path);
  std::vector<char> buffer(1 << 20);
  while (digest->bytes() < length) {
    const ssize_t n =
        ::read(fd, buffer.data(), std::min<int64_t>(buffer.size(), length - digest->bytes()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status =
          n < 0 ? ErrnoError("read", path)
                : absl::DataLossError(absl::StrCat(path, ": shorter than ", length, " bytes"));
      ::close(fd);
      return status;
    }
    digest->Update(absl::string_view(buffer.data(), n));
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace titan
