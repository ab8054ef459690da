#include "lib/rl/rl_trainer.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/config/job_config.h"
#include "lib/metrics/flops.h"
#include "lib/model/autocast.h"
#include "lib/model/op_cache.h"
#include "lib/profiling/phase_range.h"
#include "lib/rl/losses.h"
#include "lib/rl/rewards.h"
#include "lib/rl/rl_config.h"
#include "lib/train/chunked_cross_entropy.h"
#include "lib/train/device.h"
#include "lib/train/grad_clip.h"
#include "lib/train/host_heap.h"
#include "lib/train/stop_signal.h"
#include "lib/util/file_util.h"
#include "lib/util/short_text.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"
#include "lib/util/torch_errors.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// Sampling seeds: step s on data-parallel rank r draws from seed + s·kStepSeedStride + r, so a
// resumed run samples what the uninterrupted one did.
constexpr uint64_t kStepSeedStride = 1000003;

// A loss or gradient norm that is not finite means the update diverged and has reached the
// weights: `where` names the update, `then` what was kept.
absl::Status CheckFiniteUpdate(const StepMetrics& m, absl::string_view where,
                               absl::string_view then) {
  if (std::isfinite(m.loss) && std::isfinite(m.grad_norm)) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(where, ": loss = ", m.loss, ", grad_norm = ", m.grad_norm,
                                         ", not finite: the update diverged", then));
}

// OK unless `prompt_ids` (given, or EncodePrompt's) is empty, when the response would follow
// nothing (encoded: an empty prompt without chat template text, and no BOS); the error starts with
// `where`.
absl::Status CheckPromptIdsNotEmpty(const TokenIds& prompt_ids, bool given,
                                    absl::string_view where) {
  if (!prompt_ids.empty()) return absl::OkStatus();
  if (given) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"prompt_ids\" is empty: the response would follow no token"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where,
      ": an empty prompt, and the tokenizer has no BOS: the response would follow no token; give "
      "it text (or a chat_template that adds some)"));
}

}  // namespace

RlTrainer::RlTrainer(const JobConfig& config, const DistributedRuntime& runtime)
    : config_(config), runtime_(runtime), rl_(config_.rl()) {}

RlTrainer::~RlTrainer() = default;

TokenIds RlTrainer::EncodePrompt(const std::string& prompt) const {
  // A chat template spells its special tokens on purpose, as transformers' apply_chat_template,
  // which adds no BOS of its own: a template that starts with the BOS's text gets one BOS.
  std::vector<int32_t> ids = tokenizer_->Encode(ApplyChatTemplate(rl_.chat_template(), prompt),
                                                false, false, SpecialTokenText::kParse);
  const std::optional<int32_t> bos = tokenizer_->bos_id();
  if (bos.has_value() && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  // Prompts too long for a response are cut from the left (the question is usually last), after
  // the BOS, as transformers' left truncation keeps special tokens. RlJobConfig keeps
  // max_new_tokens below max_seq_len: room is at least one token.
  const size_t room = static_cast<size_t>(rl_.max_seq_len() - rl_.max_new_tokens());
  if (ids.size() <= room) return TokenIds(ids.begin(), ids.end());
  LOG_FIRST_N(WARNING, 1) << "a prompt of " << ids.size() << " tokens is cut from the left to "
                          << room << " ([rl] max_seq_len - max_new_tokens); later cuts are not "
                          << "logged";
  const size_t kept_bos = bos.has_value() && room > 1 ? 1 : 0;
  TokenIds cut(ids.begin(), ids.begin() + kept_bos);
  cut.insert(cut.end(), ids.end() - (room - kept_bos), ids.end());
  return cut;
}

absl::Status RlTrainer::CheckPromptHasTokens(const std::string& prompt,
                                             absl::string_view where) const {
  // With a BOS every prompt has one.
  if (tokenizer_->bos_id().has_value()) return absl::OkStatus();
  return CheckPromptIdsNotEmpty(EncodePrompt(prompt), /*given=*/false, where);
}

TokenIds RlTrainer::EncodeResponse(const std::string& response, bool add_eos) const {
  // Parsed: rollouts.jsonl's responses end with their stop token's text, which must replay as it.
  std::vector<int32_t> ids = tokenizer_->Encode(response, false, false, SpecialTokenText::kParse);
  // A response that already ends with the EOS (a generation fed back) gets no second one (TRL).
  if (add_eos && (ids.empty() || ids.back() != tokenizer_->eos_id())) {
    ids.push_back(tokenizer_->eos_id());
  }
  return TokenIds(ids.begin(), ids.end());
}

TokenIds RlTrainer::FitResponse(const TokenIds& prompt, TokenIds response, int64_t* cut) const {
  // EncodePrompt leaves at least max_new_tokens of room.
  const size_t room = static_cast<size_t>(rl_.max_seq_len()) - prompt.size();
  if (response.size() > room) {
    response.resize(room);
    ++*cut;
  }
  return response;
}

absl::Status RlTrainer::CheckIdsInVocabulary(const TokenIds& ids, absl::string_view field,
                                             absl::string_view where) const {
  const int64_t vocab = policy_.info.args.vocab_size;
  for (const int64_t id : ids) {
    if (id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"", field, "\" holds ", id,
                                                     ", past the model's vocabulary of ", vocab));
    }
  }
  return absl::OkStatus();
}

absl::Status RlTrainer::CheckRolloutFits(size_t p, size_t r) const {
  if (p + r <= static_cast<size_t>(rl_.max_seq_len())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      p, " prompt + ", r, " response tokens exceed [rl] max_seq_len = ", rl_.max_seq_len(),
      ": a scored rollout is not cut (its last token carries the reward); raise max_seq_len or "
      "leave the rollout out"));
}

SamplingOptions RlTrainer::SamplingFromConfig(uint64_t seed, bool greedy) const {
  SamplingOptions options;
  options.max_new_tokens = rl_.max_new_tokens();
  options.temperature = greedy ? 0.0 : rl_.temperature();
  options.top_k = rl_.top_k();
  options.top_p = rl_.top_p();
  options.stop_tokens = stop_tokens_.ids;
  options.pad_id = tokenizer_->eos_id();
  options.seed = seed;
  return options;
}

absl::StatusOr<Generation> RlTrainer::Generate(const std::vector<std::string>& prompts,
                                               const SamplingOptions& options) {
  PhaseRange range("generation");
  std::vector<TokenIds> ids;
  for (const std::string& prompt : prompts) ids.push_back(EncodePrompt(prompt));
  std::function<absl::StatusOr<bool>(bool)> all_stopped;
  if (runtime_.distributed()) {
    all_stopped = [this](bool stopped) { return runtime_.AllAgree(stopped); };
  }
  // [training] mixed_precision_param, as titan_train's forwards (set on GPUs only).
  const AutocastScope autocast(setup_.device.type(), setup_.autocast_dtype);
  std::unique_ptr<DataParallel::GatheredScope> gathered;
  if (rl_.gather_for_generation()) {
    TITAN_ASSIGN_OR_RETURN(gathered, DataParallel::GatheredScope::Gather(*policy_.data_parallel));
  }
  absl::StatusOr<Generation> generation =
      titan::Generate(*policy_.model, *policy_.data_parallel, ids, options, all_stopped);
  // Aborted: the logits were not finite. Say which weights, as far as this process knows them.
  if (!absl::IsAborted(generation.status())) return generation;
  const std::string weights = state_.step > loaded_step_
                                  ? absl::StrCat("as step ", state_.step, "'s update left them")
                              : weights_from_.empty() ? std::string("randomly initialised")
                                                      : absl::StrCat("loaded from ", weights_from_);
  return absl::AbortedError(
      absl::StrCat("the policy's logits are not finite (NaN or infinite): its weights, ", weights,
                   ", have diverged (too large, or not finite)"));
}

absl::StatusOr<std::vector<std::string>> RlTrainer::ResponseTexts(const Generation& generation,
                                                                  bool with_stop_token) const {
  std::vector<std::string> texts;
  for (size_t i = 0; i < generation.responses.size(); ++i) {
    const TokenIds& response = generation.responses[i];
    const bool drop_stop = generation.stopped[i] && !with_stop_token;
    const std::vector<int32_t> ids(response.begin(), response.end() - (drop_stop ? 1 : 0));
    // Ids past the tokenizer (a padded embedding's) are text-less, as `tokenizers`' decode.
    TITAN_ASSIGN_OR_RETURN(std::string text, tokenizer_->Decode(ids, UnknownIds::kEmpty));
    texts.push_back(std::move(text));
  }
  return texts;
}

absl::StatusOr<std::vector<double>> RlTrainer::Rewards(
    const std::vector<std::string>& prompts, const std::vector<std::string>& responses,
    const std::vector<const RlExample*>& examples, const Generation& generation) {
  PhaseRange range("scoring");
  if (reward_model_ != nullptr) {
    TITAN_ASSIGN_OR_RETURN(std::vector<double> scores,
                           reward_model_->Score(generation.prompts, generation.responses));
    TITAN_RETURN_IF_ERROR(CheckFiniteRewards(
        scores, absl::StrCat("[rl] reward_model_path ", rl_.reward_model_path())));
    return scores;
  }
  if (rl_.reward() != "command") {
    std::vector<double> rewards;
    for (size_t i = 0; i < responses.size(); ++i) {
      rewards.push_back(VerifierReward(rl_.reward(), responses[i], examples[i]->answer));
    }
    return rewards;
  }
  std::vector<ScoredRollout> rollouts;
  for (size_t i = 0; i < responses.size(); ++i) {
    rollouts.push_back({prompts[i], responses[i], examples[i]->answer});
  }
  // A SIGINT/SIGTERM ends the wait at once: the scorer may take minutes, past a preemption's grace.
  return ScoreWithCommand(rl_.reward_command(), rollouts,
                          absl::Seconds(rl_.reward_timeout_seconds()), &StopSignal::Received);
}

std::vector<const RlExample*> RlTrainer::StepExamples(int64_t step) const {
  const int64_t total = static_cast<int64_t>(train_examples_.size());
  const int64_t local = rl_.prompts_per_step() / setup_.dp_size;
  const int64_t first = (step - 1) * rl_.prompts_per_step() + setup_.dp_rank * local;
  std::vector<const RlExample*> out;
  int64_t epoch = -1;
  std::vector<int64_t> order(total);
  for (int64_t g = first; g < first + local; ++g) {
    if (g / total != epoch) {
      // Each pass over the examples in its own seeded order.
      epoch = g / total;
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(),
                   std::mt19937_64(static_cast<uint64_t>(setup_.seed) * 7919 + epoch));
    }
    out.push_back(&train_examples_[order[g % total]]);
  }
  return out;
}

at::Tensor RlTrainer::ResponseLogProbs(ModelBundle& model, const SequenceBatch& batch,
                                       at::Tensor* values, at::Tensor* entropy) {
  Decoder& decoder = *model.model;
  const int64_t p = batch.prompt_len;
  const int64_t t = batch.response_mask.size(1);
  // Sampled rollouts' log-probabilities are the scaled distribution's (TRL's GRPO); RlJobConfig
  // refuses a temperature for sft and dpo training, which sample nothing.
  const double temperature = rl_.temperature() > 0 ? rl_.temperature() : 1.0;
  const at::Tensor labels = batch.tokens.slice(1, p, p + t);
  const int64_t chunk_tokens = config_.training().loss_chunk_size();
  at::Tensor chunked_entropy;
  const AutocastScope autocast(setup_.device.type(), setup_.autocast_dtype);
  const at::Tensor out = model.data_parallel->Forward([&] {
    DecoderInputs inputs;
    inputs.positions = batch.positions;
    inputs.valid = batch.valid;
    const BatchContext context =
        decoder.PrepareBatch(batch.tokens.size(0), batch.tokens.size(1), inputs);
    // Head() split in two, so the value head reads the same normalised trunk output.
    const at::Tensor hidden = decoder.FinalNorm(decoder.RunLayers(decoder.Embed(batch.tokens), context));
    // Position i predicts token i + 1: the response's tokens come from positions p - 1 ...
    const at::Tensor response_hidden = hidden.slice(1, p - 1, p + t - 1);
    if (values != nullptr) {
      // In the value head's fp32, outside autocast (which would run the linear in bf16); FSDP's
      // bf16 gathered weights leave the trunk's output bf16.
      const AutocastScope full_precision(setup_.device.type(), std::nullopt);
      *values = Linear(response_hidden.to(value_head_.scalar_type()), value_head_)
                    .squeeze(-1)
                    .to(at::kFloat);
    }
    if (chunk_tokens > 0) {
      // [training] loss_chunk_size: the head fused with the log-softmax, that many tokens at a
      // time: no [rows, T, vocab] logits.
      return ChunkedLinearCrossEntropyPerToken(
                 response_hidden.reshape({-1, response_hidden.size(2)}), decoder.OutputWeight(),
                 labels.reshape({-1}), 1.0 / temperature, chunk_tokens,
                 entropy != nullptr ? &chunked_entropy : nullptr)
          .neg()
          .view(labels.sizes());
    }
    // The head on the response positions only: no logits for the prompt.
    return Linear(response_hidden, decoder.OutputWeight());
  });
  if (chunk_tokens > 0) {
    if (entropy != nullptr) *entropy = chunked_entropy.view(labels.sizes());
    return out;
  }
  if (entropy != nullptr) {
    c10::NoGradGuard no_grad;
    *entropy = TokenEntropy(out, temperature);
  }
  return TokenLogProbs(out, labels, temperature);
}

absl::StatusOr<at::Tensor> RlTrainer::ResponseLogProbsNoGrad(ModelBundle& model,
                                                             const SequenceBatch& batch,
                                                             at::Tensor* values,
                                                             at::Tensor* entropy) {
  c10::NoGradGuard no_grad;
  const int64_t rows = batch.tokens.size(0);
  const int64_t micro = config_.training().local_batch_size();
  // Under FSDP, several microbatches share one gather of the model ([rl] gather_for_generation)
  // instead of gathering every layer again for each.
  std::unique_ptr<DataParallel::GatheredScope> gathered;
  if (rows > micro && rl_.gather_for_generation() && model.data_parallel != nullptr) {
    TITAN_ASSIGN_OR_RETURN(gathered, DataParallel::GatheredScope::Gather(*model.data_parallel));
  }
  std::vector<at::Tensor> logprobs, row_values, row_entropy;
  for (int64_t begin = 0; begin < rows; begin += micro) {
    at::Tensor part_values, part_entropy;
    logprobs.push_back(ResponseLogProbs(model, batch.Rows(begin, std::min(rows, begin + micro)),
                                        values != nullptr ? &part_values : nullptr,
                                        entropy != nullptr ? &part_entropy : nullptr));
    if (values != nullptr) row_values.push_back(part_values);
    if (entropy != nullptr) row_entropy.push_back(part_entropy);
  }
  if (values != nullptr) *values = at::cat(row_values);
  if (entropy != nullptr) *entropy = at::cat(row_entropy);
  return at::cat(logprobs);
}

absl::StatusOr<at::Tensor> RlTrainer::ReduceOverDp(const at::Tensor& values, ReduceOp op) const {
  // A copy: the collective writes into it.
  at::Tensor host = values.to(at::kCPU, at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  if (setup_.dp_size > 1) {
    TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kDp).AllReduce(host, op)));
  }
  return host;
}

absl::StatusOr<StepMetrics> RlTrainer::Step(
    const std::vector<std::string>& prompts, const std::vector<std::string>& responses,
    const std::vector<double>& rewards, const std::vector<std::string>& where,
    const std::vector<std::vector<double>>& logprobs,
    const std::vector<std::optional<TokenIds>>& response_ids,
    const std::vector<std::optional<TokenIds>>& prompt_ids) {
  if (prompts.size() != responses.size() || prompts.size() != rewards.size() ||
      (!where.empty() && where.size() != prompts.size()) ||
      (!logprobs.empty() && logprobs.size() != prompts.size()) ||
      (!response_ids.empty() && response_ids.size() != prompts.size()) ||
      (!prompt_ids.empty() && prompt_ids.size() != prompts.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Step: ", prompts.size(), " prompts, ", responses.size(), " responses and ", rewards.size(),
        " rewards", where.empty() ? "" : absl::StrCat(", ", where.size(), " names"),
        logprobs.empty() ? "" : absl::StrCat(", ", logprobs.size(), " log-probability rows")));
  }
  Rollouts rollouts;
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Given prompt ids are the tokens the response was sampled after: not cut, as the response
    // followed them whole (CheckRolloutFits refuses a row too long).
    const bool given_prompt_ids = !prompt_ids.empty() && prompt_ids[i].has_value();
    rollouts.prompts.push_back(given_prompt_ids ? *prompt_ids[i] : EncodePrompt(prompts[i]));
    const bool given_ids = !response_ids.empty() && response_ids[i].has_value();
    rollouts.responses.push_back(given_ids ? *response_ids[i]
                                           : EncodeResponse(responses[i], /*add_eos=*/false));
    const std::string name = where.empty() ? absl::StrCat("Step: rollout ", i) : where[i];
    // The prompt's ids as given or encoded above (CheckPromptHasTokens would encode it again).
    TITAN_RETURN_IF_ERROR(CheckPromptIdsNotEmpty(rollouts.prompts.back(), given_prompt_ids, name));
    // Encoded text needs no bound: the tokenizer fits the model (CheckTokenizerFitsModel).
    if (given_prompt_ids) {
      TITAN_RETURN_IF_ERROR(CheckIdsInVocabulary(rollouts.prompts.back(), "prompt_ids", name));
    }
    if (given_ids) {
      TITAN_RETURN_IF_ERROR(CheckIdsInVocabulary(rollouts.responses.back(), "response_ids", name));
    }
    const size_t tokens = rollouts.responses.back().size();
    if (absl::Status fits = CheckRolloutFits(rollouts.prompts.back().size(), tokens); !fits.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", fits.message()));
    }
    // A log-probability per token, or they would be set against other tokens' in the ratio.
    if (!logprobs.empty() && logprobs[i].size() != tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", logprobs[i].size(), " \"logprobs\" for a response of ", tokens,
          given_ids ? " tokens (its \"response_ids\")"
                    : " tokens (as the tokenizer encodes its text, its stop token's text included; "
                      "\"response_ids\" would name the sampled ones)",
          ": give one per response token"));
    }
    longest = std::max(longest, tokens);
  }
  rollouts.rewards = rewards;
  if (!logprobs.empty()) {
    // The layout of LayOutSequences: each row's tokens from column 0, 0 past them (masked).
    rollouts.generator_logprobs = at::zeros(
        {static_cast<int64_t>(logprobs.size()), static_cast<int64_t>(longest)}, at::kFloat);
    auto values = rollouts.generator_logprobs.accessor<float, 2>();
    for (size_t i = 0; i < logprobs.size(); ++i) {
      for (size_t t = 0; t < logprobs[i].size(); ++t) {
        values[i][t] = static_cast<float>(logprobs[i][t]);
      }
    }
  }
  return StepOnRollouts(rollouts);
}

absl::StatusOr<StepMetrics> RlTrainer::StepOnRollouts(const Rollouts& rollouts) {
  if (!IsPolicyGradient(rl_.algorithm())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Step takes rollouts: [rl] algorithm must be grpo, dapo or ppo, not ",
                     rl_.algorithm()));
  }
  TITAN_RETURN_IF_ERROR(CheckFiniteRewards(rollouts.rewards, "Step"));
  return CatchTorchErrors([&]() -> absl::StatusOr<StepMetrics> {
    TITAN_ASSIGN_OR_RETURN(StepMetrics m, RlUpdate(rollouts));
    TITAN_RETURN_IF_ERROR(CheckFiniteUpdate(m, "Step", ""));
    return m;
  });
}

void RlTrainer::SetThroughput(int64_t tokens, int64_t trained_tokens, int64_t width, double seconds,
                              double earlier_seconds, StepMetrics& m) const {
  // Attention FLOPs at the width the batch is laid out in.
  const int64_t flops_per_token = policy_.info.spec->flops_per_token(policy_.info.args, width);
  m.tps = ComputeThroughput(tokens, earlier_seconds + seconds, flops_per_token, peak_flops_)
              .tokens_per_second;
  const Throughput update =
      ComputeThroughput(trained_tokens, seconds, flops_per_token, peak_flops_);
  m.tflops = update.tflops;
  m.mfu = update.mfu_percent;
}

absl::StatusOr<double> RlTrainer::Evaluate() {
  if (eval_examples_.empty()) return 0.0;
  c10::NoGradGuard no_grad;
  // Every rank evaluates the whole held-out set: sharded ranks run the same forwards anyway.
  std::vector<const RlExample*> examples;
  std::vector<std::string> prompts;
  for (const RlExample& e : eval_examples_) {
    examples.push_back(&e);
    prompts.push_back(e.prompt);
  }
  if (rl_.algorithm() == "dpo") {
    // Held-out preference accuracy: the policy's implicit reward ranks chosen above rejected.
    std::vector<TokenIds> prompt_ids, responses;
    int64_t cut = 0;  // counted by the training steps' log
    for (int pass = 0; pass < 2; ++pass) {
      for (const RlExample* e : examples) {
        prompt_ids.push_back(EncodePrompt(e->prompt));
        responses.push_back(FitResponse(
            prompt_ids.back(), EncodeResponse(pass == 0 ? e->response : e->rejected, true), &cut));
      }
    }
    const SequenceBatch batch =
        LayOutSequences(prompt_ids, responses, tokenizer_->eos_id(), setup_.device);
    const at::Tensor mask = batch.response_mask.to(at::kFloat);
    TITAN_ASSIGN_OR_RETURN(const at::Tensor policy_logp, ResponseLogProbsNoGrad(policy_, batch));
    TITAN_ASSIGN_OR_RETURN(const at::Tensor reference_logp,
                           ResponseLogProbsNoGrad(*reference_, batch));
    const at::Tensor log_ratio = policy_logp - reference_logp;
    const at::Tensor ratio = (log_ratio * mask).sum(1);
    const int64_t n = static_cast<int64_t>(examples.size());
    return PreferenceScores(ratio.slice(0, 0, n) - ratio.slice(0, n, 2 * n)).mean().item<double>();
  }
  TITAN_ASSIGN_OR_RETURN(const Generation generation,
                         Generate(prompts, SamplingFromConfig(0, /*greedy=*/true)));
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                         ResponseTexts(generation, /*with_stop_token=*/false));
  TITAN_ASSIGN_OR_RETURN(const std::vector<double> rewards,
                         Rewards(prompts, texts, examples, generation));
  return std::accumulate(rewards.begin(), rewards.end(), 0.0) / rewards.size();
}

std::string RlTrainer::RolloutsPath(int rank) const {
  return absl::StrCat(
      config_.job().dump_folder(),
      rank == 0 ? "/rollouts.jsonl" : absl::StrCat("/rollouts_rank", rank, ".jsonl"));
}

absl::Status RlTrainer::WriteRollouts(const std::vector<const RlExample*>& examples,
                                      const std::vector<double>& rewards,
                                      const Generation& generation) {
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> responses,
                         ResponseTexts(generation, /*with_stop_token=*/true));
  const at::Tensor logprobs = generation.logprobs.cpu();
  std::string text;
  for (size_t i = 0; i < responses.size(); ++i) {
    const int64_t length = static_cast<int64_t>(generation.responses[i].size());
    const at::Tensor row = logprobs[i].slice(0, 0, length).to(at::kDouble).contiguous();
    nlohmann::json line = {
        {"step", state_.step + 1},
        {"prompt", examples[i]->prompt},
        {"response", responses[i]},
        {"answer", examples[i]->answer},
        {"logprobs", std::vector<double>(row.data_ptr<double>(), row.data_ptr<double>() + length)},
        {"prompt_ids", generation.prompts[i]},
        {"response_ids", generation.responses[i]},
    };
    // No rewards (a failed scorer): the rollouts are kept all the same.
    line["reward"] = i < rewards.size() ? nlohmann::json(rewards[i]) : nlohmann::json(nullptr);
    absl::StrAppend(&text, JsonText(line), "\n");
  }
  const std::string& path = rollouts_.front().rows_path();
  std::FILE* file = std::fopen(path.c_str(), "ae");  // e: O_CLOEXEC, kept from child processes
  if (file == nullptr) return ErrnoError("open", path);
  // A short write (a disk full for a moment) fails the step even when the close then succeeds.
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) return ErrnoError("write", path);
  return absl::OkStatus();
}

absl::Status RlTrainer::Train() {
  const auto& training = config_.training();
  const auto& ckpt = config_.checkpoint();
  const std::string& algorithm = rl_.algorithm();
  auto log = [&](StepMetrics& m) -> absl::Status {
    if (metrics_ != nullptr) return metrics_->Log(m);
    return absl::OkStatus();
  };
  // Before any step: an example without an answer would score 0 whatever the response.
  if (RewardNeedsAnswer(rl_.reward())) {
    const std::string why =
        absl::StrCat("[rl] reward = \"", rl_.reward(), "\" compares each response with it");
    if (IsPolicyGradient(algorithm)) TITAN_RETURN_IF_ERROR(RequireAnswers(train_examples_, why));
    if (algorithm != "dpo") TITAN_RETURN_IF_ERROR(RequireAnswers(eval_examples_, why));
  }
  // A step takes distinct prompts: a repeated one would count twice in the step's mean, as
  // another group of the same prompt (group_size samples each prompt group_size times).
  if (rl_.prompts_per_step() > static_cast<int64_t>(train_examples_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] prompts_per_step = ", rl_.prompts_per_step(), " exceeds the ", train_examples_.size(),
        " training examples of ",
        rl_.prompts_path().empty() ? absl::StrCat("[rl] task = ", rl_.task())
                                   : absl::StrCat("[rl] prompts_path = ", rl_.prompts_path()),
        ": each step would repeat some of them; set prompts_per_step <= ", train_examples_.size(),
        IsPolicyGradient(algorithm) ? " (group_size sets the samples per prompt)" : "",
        " or give more examples"));
  }
  // Once the run has passed its checks (a refused run leaves the previous one's), and only for
  // runs that add steps: --generate and --step_rollouts in a run's folder do not replace its
  // config.
  TITAN_RETURN_IF_ERROR(WriteRunConfig());
  // SIGINT/SIGTERM: finish the step, save and exit 0, as titan_train.
  StopSignal stop_signal(runtime_);
  // Without a held-out set there is no evaluation to log: a 0 would read as a measured one.
  const bool held_out = !eval_examples_.empty();
  const std::string eval_key = algorithm == "dpo" ? "eval_preference_accuracy" : "eval_reward";
  if (state_.step == 0 && held_out) {
    TITAN_ASSIGN_OR_RETURN(const double eval, Evaluate());
    StepMetrics m;
    m.evaluation_only = true;
    m.extra = {{eval_key, eval}};
    TITAN_RETURN_IF_ERROR(log(m));
  }
  while (state_.step < training.steps()) {
    const int64_t step = state_.step + 1;
    const std::vector<const RlExample*> examples = StepExamples(step);
    StepMetrics m;
    // The profiled step is the rollouts and the update: evaluation and saving stay out.
    if (profiler_ != nullptr) TITAN_RETURN_IF_ERROR(profiler_->StepBegin(step));
    Stopwatch stopwatch;
    if (IsPolicyGradient(algorithm)) {
      // group_size samples per prompt, consecutive.
      std::vector<const RlExample*> rows;
      std::vector<std::string> prompts;
      for (const RlExample* e : examples) {
        for (int g = 0; g < rl_.group_size(); ++g) {
          rows.push_back(e);
          prompts.push_back(e->prompt);
        }
      }
      const uint64_t seed = static_cast<uint64_t>(setup_.seed) + step * kStepSeedStride +
                            setup_.dp_rank;
      absl::StatusOr<Generation> sampled = Generate(prompts, SamplingFromConfig(seed, false));
      TITAN_RETURN_IF_ERROR(WithContext(sampled.status(), absl::StrCat("step ", step)));
      const Generation generation = *std::move(sampled);
      const double generation_seconds = stopwatch.Lap();
      Rollouts rollouts;
      TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                             ResponseTexts(generation, /*with_stop_token=*/false));
      int64_t generated = 0;
      int64_t longest = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const int64_t length = static_cast<int64_t>(generation.responses[i].size());
        generated += length;
        longest = std::max(longest, length);
        rollouts.prompts.push_back(generation.prompts[i]);  // as Generate encoded them
        rollouts.responses.push_back(generation.responses[i]);
      }
      absl::StatusOr<std::vector<double>> rewards = Rewards(prompts, texts, rows, generation);
      TITAN_RETURN_IF_ERROR(
          WriteRollouts(rows, rewards.ok() ? *rewards : std::vector<double>(), generation));
      TITAN_RETURN_IF_ERROR(rewards.status());
      rollouts.rewards = *rewards;
      // Cut to the longest response, the width --step_rollouts lays these rows out at: a wider
      // batch sums the loss and gradients in another order (not bitwise the replay's).
      rollouts.generator_logprobs = generation.logprobs.slice(1, 0, longest);
      const double scoring_seconds = stopwatch.Lap();
      // The step's tps, which RlUpdate sets, counts generation and scoring in.
      rollouts.seconds = generation_seconds + scoring_seconds;
      TITAN_ASSIGN_OR_RETURN(m, RlUpdate(rollouts));
      const double update_seconds = stopwatch.Lap();
      TITAN_ASSIGN_OR_RETURN(
          const at::Tensor all_generated,
          ReduceOverDp(at::scalar_tensor(static_cast<double>(generated), at::kDouble),
                       ReduceOp::kSum));
      m.extra.emplace_back("generation_tps", all_generated.item<double>() / generation_seconds);
      // The update's laid-out tokens (padding in): prompt width + longest response per row. None
      // without an optimizer step, as the update's other metrics.
      const int64_t update_tokens =
          generation.batch.tokens.size(0) * (generation.batch.prompt_len + longest);
      if (m.updated) {
        m.extra.emplace_back("training_tps", static_cast<double>(update_tokens) * setup_.dp_size *
                                                 rl_.ppo_epochs() / update_seconds);
      }
    } else {
      TITAN_ASSIGN_OR_RETURN(m, SftOrDpoStep(examples));
    }
    if (profiler_ != nullptr) TITAN_RETURN_IF_ERROR(profiler_->StepEnd(step));
    ReturnFreedHostHeapAtStep(step, training.gc_freq());
    // Before the evaluation (which would sample from NaN probabilities) and the checkpoint.
    TITAN_RETURN_IF_ERROR(CheckFiniteUpdate(
        m, absl::StrCat("step ", step),
        "; stopped before saving it: a checkpoint saved before, if any, is the last good one"));
    state_.step = step;
    ++state_.lr_step;
    m.step = step;
    m.memory_gib = PeakMemoryGiB(setup_.device);
    const bool last = step == training.steps();
    if (held_out && (step % rl_.eval_freq() == 0 || last)) {
      TITAN_ASSIGN_OR_RETURN(const double eval, Evaluate());
      m.extra.emplace_back(eval_key, eval);
    }
    const bool logged = step == 1 || step % config_.metrics().log_freq() == 0 || last ||
                        step % rl_.eval_freq() == 0;
    if (logged) TITAN_RETURN_IF_ERROR(log(m));
    if (step == 1) runtime_.SetTimeout(absl::Seconds(config_.comm().train_timeout_seconds()));
    const bool saved = checkpointer_ && (step % ckpt.interval() == 0 || last ||
                                         (step == 1 && ckpt.enable_first_step_checkpoint()));
    if (saved) TITAN_RETURN_IF_ERROR(SaveStep(last && ckpt.last_save_model_only()));
    TITAN_ASSIGN_OR_RETURN(const int signal, stop_signal.Agreed());
    if (signal != 0 && !last) {
      LOG(WARNING) << "received signal " << signal << "; stopping after step " << step;
      // The run's last step gets its row, as a finished run's does.
      if (!logged) TITAN_RETURN_IF_ERROR(log(m));
      if (checkpointer_ && !saved) TITAN_RETURN_IF_ERROR(SaveStep(false));
      break;
    }
  }
  TITAN_RETURN_IF_ERROR(stop_signal.Finish());
  if (checkpointer_) TITAN_RETURN_IF_ERROR(checkpointer_->FinishPendingSave());
  if (critic_checkpointer_) TITAN_RETURN_IF_ERROR(critic_checkpointer_->FinishPendingSave());
  LOG(INFO) << "titan_rl done at step " << state_.step;
  return absl::OkStatus();
}

absl::Status RlTrainer::WriteRunConfig() const {
  if (runtime_.rank() != 0) return absl::OkStatus();
  return WriteFileAtomically(config_.job().dump_folder() + "/config.toml",
                             JobConfigToToml(config_));
}

absl::Status RlTrainer::SaveStep(bool model_only) {
  // PPO's value head, then the policy's step: a resume keys on the policy's step, so it appears
  // only once the critic's is durable.
  if (critic_checkpointer_) {
    // The policy's earlier step is committed before the critic's pruning counts it.
    TITAN_RETURN_IF_ERROR(checkpointer_->FinishPendingSave());
    TITAN_RETURN_IF_ERROR(critic_checkpointer_->Save(state_, model_only));
    TITAN_RETURN_IF_ERROR(critic_checkpointer_->FinishPendingSave());
  }
  return checkpointer_->Save(state_, model_only);
}

absl::StatusOr<std::string> RlTrainer::SaveAsNextStep(StepMetrics m) {
  if (checkpointer_ == nullptr) {
    return absl::FailedPreconditionError("--save_step: this run saves no checkpoints");
  }
  const int64_t step = state_.step + 1;
  TITAN_RETURN_IF_ERROR(
      CheckFiniteUpdate(m, absl::StrCat("step ", step),
                        "; not saved: the run's last checkpoint, if any, is its last good one"));
  TITAN_RETURN_IF_ERROR(WriteRunConfig());
  state_.step = step;
  ++state_.lr_step;
  m.step = step;
  m.memory_gib = PeakMemoryGiB(setup_.device);
  // The run's last step is saved as training's last save ([checkpoint] last_save_model_only,
  // last_save_in_hf, export_dtype).
  const bool last = step == config_.training().steps();
  TITAN_RETURN_IF_ERROR(SaveStep(last && config_.checkpoint().last_save_model_only()));
  TITAN_RETURN_IF_ERROR(checkpointer_->FinishPendingSave());
  if (critic_checkpointer_) TITAN_RETURN_IF_ERROR(critic_checkpointer_->FinishPendingSave());
  // Once saved: a failed save leaves no metrics row of a step that is not there.
  if (metrics_ != nullptr) TITAN_RETURN_IF_ERROR(metrics_->Log(m));  // rank 0's
  return checkpointer_->StepDirectory(step);
}

absl::Status RlTrainer::SavePolicyWeights(const std::string& path) {
  TITAN_RETURN_IF_ERROR(RefuseNonFiniteWeights(policy_.params, runtime_, path));
  const NamedTensors local = DetachedParams(policy_.params);
  // The other ranks wait while rank 0 copies and writes the whole policy.
  const int64_t bytes = policy_.num_params * local.front().second.element_size();
  const ScopedCollectiveTimeout wait_for_writer(runtime_, OneWriterTimeout(config_, bytes));
  NamedTensors full;
  TITAN_RETURN_IF_ERROR(policy_.data_parallel->GatherFull(
      local, [&](const std::string& name, const at::Tensor& whole) {
        if (runtime_.rank() == 0) full.emplace_back(name, whole.to(at::kCPU));
        return absl::OkStatus();
      }));
  const absl::Status written = runtime_.rank() == 0 ? WriteSafetensors(path, full) : absl::OkStatus();
  TITAN_ASSIGN_OR_RETURN(const bool all_written, runtime_.AllAgree(written.ok()));
  TITAN_RETURN_IF_ERROR(written);
  if (!all_written) return absl::InternalError(absl::StrCat("rank 0 failed to write ", path));
  return absl::OkStatus();
}

absl::Status RunRl(const JobConfig& config, const DistributedRuntime& runtime) {
  const absl::Status status = CatchTorchErrors([&]() -> absl::Status {
    TITAN_ASSIGN_OR_RETURN(const JobConfig rl_config, RlJobConfig(config, RlMode::kTrain));
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<RlTrainer> trainer,
                           RlTrainer::Create(rl_config, runtime, RlMode::kTrain));
    return trainer->Train();
  });
  const int signal = StopSignal::Received();
  if (absl::IsCancelled(status) && signal != 0) {
    // The step cannot finish without its rewards, so nothing is saved: as during startup, the run
    // ends with the signal's own status (143 for SIGTERM), not 0, which means "saved".
    LOG(WARNING) << "received signal " << signal << " while waiting for the scorer ("
                 << status.message() << "); stopping without finishing or saving the step: the "
                 << "last checkpoint is the last good one";
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  return status;
}

}  // namespace titan
