#ifndef TITAN_LIB_UTIL_REDACT_H_
#define TITAN_LIB_UTIL_REDACT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace titan {

// `url` with its userinfo (user:password@) replaced by "***@", for messages: HF_ENDPOINT, a
// scorer's command may carry credentials.
std::string RedactUrl(absl::string_view url);

// `text` (a server's error message, say) with RedactUrl applied to every URL in it.
std::string RedactUrlsIn(absl::string_view text);

// Whether a name reads as a secret's: one of its words (split at _ - . and camelCase) is token,
// secret, password, passwd, credential(s), authorization or apikey, or key after api, access,
// secret or private. "HF_TOKEN", "api_key", "X-Api-Key", "accessToken"; not "max_new_tokens".
bool IsSecretName(absl::string_view name);

// `text` relayed from elsewhere (a child process's stderr, a server's error, a command line), with
// every secret it shows replaced by "***": URL userinfo (RedactUrlsIn); the value of every
// environment variable whose name holds TOKEN, KEY, SECRET, PASSWORD, PASSWD or CREDENTIAL (any
// case; values under 8 characters are left, not to mask common words); and the value after a
// secret name and '=' or ':' ("api_key=sk-1", "\"password\": \"x\"", "Authorization: Bearer x",
// the scheme kept).
std::string RedactSecretsIn(absl::string_view text);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_REDACT_H_
