#include "lib/util/redact.h"

#include <stdlib.h>

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(RedactUrlTest, ReplacesUserinfoOnly) {
  EXPECT_EQ(RedactUrl("http://alice:S3cretPass@127.0.0.1:18002/api/models/org/m"),
            "http://***@127.0.0.1:18002/api/models/org/m");
  EXPECT_EQ(RedactUrl("https://hf_token@mirror.example"), "https://***@mirror.example");
  EXPECT_EQ(RedactUrl("https://a:b@c@host/x"), "https://***@host/x");
}

TEST(RedactUrlsInTest, RedactsEveryUrlInText) {
  EXPECT_EQ(
      RedactUrlsIn("no access to http://alice:pw@hub:8080/org/m, see "
                   "'https://tok@mirror/x' or https://plain/y"),
      "no access to http://***@hub:8080/org/m, see 'https://***@mirror/x' or https://plain/y");
  EXPECT_EQ(RedactUrlsIn("http://a:b@h"), "http://***@h");
  EXPECT_EQ(RedactUrlsIn("odd :// and x://u@"), "odd :// and x://***@");
  EXPECT_EQ(RedactUrlsIn("nothing here"), "nothing here");
}

TEST(RedactUrlTest, LeavesUrlsWithoutUserinfoAlone) {
  EXPECT_EQ(RedactUrl("https://huggingface.co/org/m"), "https://huggingface.co/org/m");
  EXPECT_EQ(RedactUrl("https://host/path/with@sign?q=a@b#x@y"),
            "https://host/path/with@sign?q=a@b#x@y");
  EXPECT_EQ(RedactUrl("not a url"), "not a url");
}

TEST(IsSecretNameTest, ReadsNamesByTheirWords) {
  for (const char* name : {"HF_TOKEN", "api_key", "OPENAI_API_KEY", "X-Api-Key", "apiKey", "apikey",
                           "accessToken", "HFToken", "--hf_token", "client_secret", "password",
                           "DB_PASSWD", "credentials", "Authorization", "aws_secret_access_key"}) {
    EXPECT_TRUE(IsSecretName(name)) << name;
  }
  for (const char* name : {"max_new_tokens", "tokenizer_path", "key", "sort_key", "monkey",
                           "keyboard", "author", "passage", "reward_command"}) {
    EXPECT_FALSE(IsSecretName(name)) << name;
  }
}

TEST(RedactSecretsInTest, MasksTheValueAfterASecretName) {
  EXPECT_EQ(RedactSecretsIn("Authorization failed for api_key=sk-abc123def456, retry"),
            "Authorization failed for api_key=***, retry");
  EXPECT_EQ(RedactSecretsIn("{\"password\": \"hunter2\", \"user\": \"bob\"}"),
            "{\"password\": \"***\", \"user\": \"bob\"}");
  EXPECT_EQ(RedactSecretsIn("{'secret': 'two words', \"Authorization\": \"Bearer a b\"}"),
            "{'secret': '***', \"Authorization\": \"Bearer ***\"}");
  EXPECT_EQ(RedactSecretsIn("token = \"unclosed\nnext line"), "token = \"***\nnext line");
  EXPECT_EQ(RedactSecretsIn("sent Authorization: Bearer eyJhbGciOi.x.y\nthen 401"),
            "sent Authorization: Bearer ***\nthen 401");
  EXPECT_EQ(RedactSecretsIn("HF_TOKEN=hf_abc python score.py --token hf_x"),
            "HF_TOKEN=*** python score.py --token hf_x");
  EXPECT_EQ(RedactSecretsIn("GET https://api/x?token=abc&n=1"), "GET https://api/x?token=***&n=1");
  // URLs' userinfo as before; names that are no secret's keep their values.
  EXPECT_EQ(RedactSecretsIn("http://a:b@h max_new_tokens = 64, token: "),
            "http://***@h max_new_tokens = 64, token: ");
  EXPECT_EQ(RedactSecretsIn("nothing here"), "nothing here");
}

TEST(RedactSecretsInTest, KeepsTheEscapesOfQuotesAroundAMaskedValue) {
  // Inside a TOML basic string (config.toml's print_config), so the text stays valid TOML.
  EXPECT_EQ(RedactSecretsIn(R"(description = "say \"password=hunter22\" ok")"),
            R"(description = "say \"password=***\" ok")");
  EXPECT_EQ(RedactSecretsIn(R"(cmd = "curl -H \"Authorization: Bearer sk-abc123\" http://x")"),
            R"(cmd = "curl -H \"Authorization: Bearer ***\" http://x")");
  EXPECT_EQ(RedactSecretsIn(R"(body = "{\"password\": \"two words\", \"user\": \"bob\"}")"),
            R"(body = "{\"password\": \"***\", \"user\": \"bob\"}")");
}

TEST(RedactSecretsInTest, MasksSecretEnvironmentValuesWherever) {
  ASSERT_EQ(setenv("TITAN_TEST_OPENAI_API_KEY", "sk-live-0123456789", 1), 0);
  ASSERT_EQ(setenv("titan_test_db_password", "correct horse battery", 1), 0);
  ASSERT_EQ(setenv("TITAN_TEST_SHORT_TOKEN", "abc", 1), 0);
  ASSERT_EQ(setenv("TITAN_TEST_PLAIN", "not-a-secret-value", 1), 0);
  EXPECT_EQ(RedactSecretsIn("401 for sk-live-0123456789 (login correct horse battery)"),
            "401 for *** (login ***)");
  // Too short to tell from a common word; under a name that is no secret's.
  EXPECT_EQ(RedactSecretsIn("abc not-a-secret-value"), "abc not-a-secret-value");
  unsetenv("TITAN_TEST_OPENAI_API_KEY");
  unsetenv("titan_test_db_password");
  unsetenv("TITAN_TEST_SHORT_TOKEN");
  unsetenv("TITAN_TEST_PLAIN");
}

}  // namespace
}  // namespace titan
