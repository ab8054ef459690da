#include "lib/checkpoint/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace titan {

at::Tensor GetCpuRngState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

absl::Status SetCpuRngState(const at::Tensor& state) {
  if (!state.defined() || state.scalar_type() != at::kByte || !state.device().is_cpu()) {
    return absl::InvalidArgumentError("CPU RNG state: expected a uint8 CPU tensor");
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state.contiguous());
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("CPU RNG state: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

nlohmann::json CaptureRngState() {
  const at::Tensor state = GetCpuRngState().contiguous();
  const absl::string_view bytes(static_cast<const char*>(state.data_ptr()), state.nbytes());
  return {{"cpu", absl::Base64Escape(bytes)}};
}

absl::Status RestoreRngState(const nlohmann::json& rng) {
  const auto cpu = rng.find("cpu");  // end() for a non-object too.
  if (cpu == rng.end() || !cpu->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rng: expected {\"cpu\": <base64 string>}, got a JSON ", rng.type_name()));
  }
  std::string bytes;
  if (!absl::Base64Unescape(cpu->get<std::string>(), &bytes)) {
    return absl::InvalidArgumentError("rng: \"cpu\" is not valid base64");
  }
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  return SetCpuRngState(state);
}

}  // namespace titan
