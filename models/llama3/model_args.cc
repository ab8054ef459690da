#include "models/llama3/model_args.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace titan {
namespace {

RopeScaling Llama31Scaling() { return {8, 1, 4, 8192}; }
RopeScaling Llama32Scaling() { return {32, 1, 4, 8192}; }

std::vector<std::pair<std::string, Llama3Args>> Flavors() {
  std::vector<std::pair<std::string, Llama3Args>> table;
  auto add = [&](const char* name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                 int64_t multiple_of, double ffn_mult, RopeScaling scaling, bool tied) {
    Llama3Args args;
    args.dim = dim;
    args.n_layers = layers;
    args.n_heads = heads;
    args.n_kv_heads = kv_heads;
    args.multiple_of = multiple_of;
    args.ffn_dim_multiplier = ffn_mult;
    args.rope_scaling = scaling;
    args.tie_word_embeddings = tied;
    table.emplace_back(name, args);
  };
  // The debug model's vocabulary comes from the tokenizer; 2048 until the trainer sets it.
  add("debugmodel", 256, 6, 16, 0, 256, 0, RopeScaling{}, false);
  table.back().second.vocab_size = 2048;
  add("1B", 2048, 16, 32, 8, 256, 1.5, Llama32Scaling(), true);
  add("3B", 3072, 28, 24, 8, 256, 1.0, Llama32Scaling(), true);
  add("8B", 4096, 32, 32, 8, 1024, 1.3, Llama31Scaling(), false);
  add("70B", 8192, 80, 64, 8, 4096, 1.3, Llama31Scaling(), false);
  add("405B", 16384, 126, 128, 8, 4096, 1.2, Llama31Scaling(), false);
  return table;
}

}  // namespace

std::vector<std::string> Llama3FlavorNames() {
  std::vector<std::string> names;
  for (const auto& [name, args] : Flavors()) names.push_back(name);
  return names;
}

absl::StatusOr<Llama3Args> Llama3Flavor(const std::string& flavor) {
  for (const auto& [name, args] : Flavors()) {
    if (name == flavor) return args;
  }
  return absl::NotFoundError(absl::StrCat("[model] flavor: unknown llama3 flavor \"", flavor,
                                          "\"; expected one of ",
                                          absl::StrJoin(Llama3FlavorNames(), ", ")));
}

}  // namespace titan
