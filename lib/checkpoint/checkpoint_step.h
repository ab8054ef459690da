#ifndef TITAN_LIB_CHECKPOINT_CHECKPOINT_STEP_H_
#define TITAN_LIB_CHECKPOINT_CHECKPOINT_STEP_H_

// Reading one committed step directory (its layout: checkpoint_manager.h).

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/checkpoint_manifest.h"
#include "nlohmann/json.hpp"

namespace titan {

inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr char kCheckpointManifestFile[] = "manifest.json";

// A committed step opened for reading: the manifest checked against the files it names, each
// piece memory-mapped. lib/interop reads titan checkpoints through it.
class CheckpointStep {
 public:
  using Piece = CheckpointPiece;
  using Tensor = CheckpointTensor;

  struct OpenOptions {
    // Open only the files that hold model pieces (a model export needs nothing else); the
    // optimizer's tensors are still listed, and reading one fails.
    bool model_files_only = false;
    // A safetensors file that cannot be opened or does not match the manifest (truncated,
    // missing) is listed in damaged() instead of failing Open (checkpoint_inspect describes the
    // rest); reading a tensor with a piece in it fails with FailedPrecondition naming the file.
    bool keep_damaged_files = false;
  };

  // `dir` is a step directory; expected_step < 0 accepts any step.
  static absl::StatusOr<std::unique_ptr<CheckpointStep>> Open(const std::string& dir,
                                                              int64_t expected_step = -1);
  static absl::StatusOr<std::unique_ptr<CheckpointStep>> Open(const std::string& dir,
                                                              int64_t expected_step,
                                                              const OpenOptions& options);
  ~CheckpointStep();

  const std::string& directory() const { return dir_; }
  int64_t step() const { return step_; }
  bool model_only() const { return model_only_; }
  const nlohmann::json& state() const { return state_; }
  const std::vector<Tensor>& model() const { return model_; }
  const std::vector<Tensor>& optimizer() const { return optimizer_; }
  // OpenOptions::keep_damaged_files: one line per damaged file, naming it and what is wrong.
  const std::vector<std::string>& damaged() const { return damaged_; }

  // A model tensor's bytes when one piece holds all of it (no copy); FailedPrecondition otherwise.
  absl::StatusOr<absl::string_view> WholeBytes(const Tensor& tensor) const;
  // A CPU tensor: aliases the mapping when one aligned piece holds it (read-only), else a copy.
  absl::StatusOr<at::Tensor> Read(const Tensor& tensor, bool verify_checksums) const;
  // Copies the part of `tensor` inside `box` (null: all of it) into `destination`.
  absl::Status ReadInto(const Tensor& tensor, const at::Tensor& destination, const TensorBox* box,
                        bool verify_checksums) const;
  // The damaged files, then every other opened piece's CRC-32 against the manifest; each problem
  // is one line naming the file (and tensor).
  std::vector<std::string> Verify() const;

 private:
  class Files;
  CheckpointStep() = default;
  // The piece's bytes, checked against its CRC-32 the first time when verify_checksums.
  absl::StatusOr<absl::string_view> PieceBytes(const Tensor& tensor, const Piece& piece,
                                               bool verify_checksums) const;

  std::string dir_;
  int64_t step_ = 0;
  bool model_only_ = true;
  nlohmann::json state_;
  std::vector<Tensor> model_;
  std::vector<Tensor> optimizer_;
  std::vector<std::string> damaged_;
  std::unique_ptr<Files> files_;
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_CHECKPOINT_STEP_H_
