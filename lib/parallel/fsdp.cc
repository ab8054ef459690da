#include "lib/parallel/fsdp.h"

#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/profiling/phase_range.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Collectives run inside autograd, which only unwinds by exception: a failed one throws.
void CheckCollective(const absl::Status& status, const char* what, const Communicator& comm) {
  TORCH_CHECK(status.ok(), "FSDP ", what, " on group ", comm.name(), ": ", status.ToString());
}

// How many of `param`'s dim-0 rows rank `rank` holds (the last ranks may hold fewer, or none).
int64_t RowsOfRank(const FsdpParamGroup::Param& param, int rank) {
  const int64_t start = rank * param.rows_per_shard;
  return std::clamp<int64_t>(param.full_shape[0] - start, 0, param.rows_per_shard);
}

// A tensor of `param`'s full shape over `padded`'s bytes ([group size, rows_per_shard * row_numel],
// contiguous, so rank r's rows follow rank r - 1's and the padding rows trail): no copy. Not a
// view, as autograd takes it as a custom function's own output.
at::Tensor FullOverPadded(const FsdpParamGroup::Param& param, const at::Tensor& padded) {
  return at::empty({0}, padded.options())
      .set_(padded.storage(), padded.storage_offset(), param.full_shape);
}

// Frees a storage's bytes, keeping it (tensors autograd holds use it) for a later refill.
void FreeStorage(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
  impl->set_nbytes(0);
}

// The slot's tensor for a weight gathered in float8: the shape and dtype autograd checks its
// gradient against, and for bytes one NaN (zero strides). Nothing reads it, as Float8Linear
// finds the cast by the tensor's identity; a read would show as NaN, not as a plausible weight.
// Dequantising instead cost three passes over the weight (through an fp32 copy) and its
// high-precision bytes.
at::Tensor Float8WeightStandIn(const std::vector<int64_t>& shape,
                               const at::TensorOptions& options) {
  const at::Tensor element = at::full({}, std::numeric_limits<double>::quiet_NaN(), options);
  return at::empty({0}, options)
      .set_(element.storage(), 0, shape, std::vector<int64_t>(shape.size(), 0));
}

// Elements of `dtype` that hold `numel` float8 bytes.
int64_t Float8Elements(int64_t numel, at::ScalarType dtype) {
  const int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
  return (numel + size - 1) / size;
}

struct AllGatherFunction : public torch::autograd::Function<AllGatherFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList shards,
                                                const FsdpParamGroup* group,
                                                std::vector<std::optional<Float8Tensor>>* casts) {
    // The group outlives every graph built from it (the trainer owns both); a plain address
    // needs no custom-class registration.
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return group->AllGatherFlat(shards.vec(), casts);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* group = reinterpret_cast<const FsdpParamGroup*>(ctx->saved_data["group"].toInt());
    torch::autograd::variable_list shard_grads;
    if (group->reduce_scatter_queue() != nullptr) {
      // The queue adds them to the shards' gradients once the collective is done.
      group->reduce_scatter_queue()->Issue(*group, grads);
      shard_grads.resize(grads.size());
    } else {
      shard_grads = group->ReduceScatterGrads(grads);
    }
    shard_grads.emplace_back();  // for the group argument
    shard_grads.emplace_back();  // and the casts
    return shard_grads;
  }
};

// Frees what one CallUnsharded's backward gathered again when its gather node runs, i.e. once
// every gradient of the full tensors is computed (FSDP2's post-backward reshard). Per call: a
// split backward may refill a later microbatch's tensors before an earlier one's gather runs.
class ReleaseRefilledOnGather : public torch::autograd::FunctionPreHook {
 public:
  explicit ReleaseRefilledOnGather(std::shared_ptr<std::vector<c10::Storage>> refilled)
      : refilled_(std::move(refilled)) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    for (const c10::Storage& storage : *refilled_) FreeStorage(storage);
    refilled_->clear();
    return grads;
  }

 private:
  // Storages, not tensors: a tensor would hold this node (its grad_fn), which holds this hook.
  const std::shared_ptr<std::vector<c10::Storage>> refilled_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FsdpParamGroup>> FsdpParamGroup::Create(
    const std::vector<ParamRef>& params, Communicator* shard, Communicator* replicate,
    const FsdpMixedPrecision& mixed_precision, const FsdpFloat8Params& float8) {
  if (params.empty()) return absl::InvalidArgumentError("FSDP group without parameters");
  const int size = shard->size();
  const at::ScalarType dtype = params[0].tensor->scalar_type();
  const at::ScalarType param_dtype = mixed_precision.param_dtype.value_or(dtype);
  std::vector<Param> sharded;
  int64_t offset = 0;
  int64_t gather_offset = 0;
  for (const ParamRef& ref : params) {
    const at::Tensor& full = *ref.tensor;
    if (full.dim() == 0 || full.size(0) == 0 || full.is_meta() || full.scalar_type() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FSDP parameter ", ref.name, ": expected a materialised tensor of ", c10::toString(dtype),
          " with dim 0 > 0, got ", full.toString(), " ", c10::str(full.sizes())));
    }
    Param param;
    param.name = ref.name;
    param.slot = ref.tensor;
    param.full_shape = full.sizes().vec();
    param.rows_per_shard = (full.size(0) + size - 1) / size;
    param.row_numel = full.numel() / full.size(0);
    param.offset = offset;
    param.float8 = float8.names.contains(ref.name);
    param.gather_offset = gather_offset;
    const int64_t shard_numel = param.rows_per_shard * param.row_numel;
    offset += shard_numel;
    gather_offset += param.float8 ? Float8Elements(shard_numel, param_dtype) : shard_numel;
    sharded.push_back(std::move(param));
  }
  std::unique_ptr<FsdpParamGroup> group(
      new FsdpParamGroup(std::move(sharded), offset, gather_offset, shard, replicate,
                         float8.tensor_parallel, param_dtype,
                         mixed_precision.reduce_dtype.value_or(param_dtype)));
  c10::NoGradGuard no_grad;
  for (Param& param : group->params_) {
    param.shard = group->ShardOf(param, *param.slot).requires_grad_(true);
    *param.slot = param.shard;
  }
  return group;
}

int64_t FsdpParamGroup::FirstRowHeld(const Param& param) const {
  return std::min(param.full_shape[0], shard_->rank() * param.rows_per_shard);
}

int64_t FsdpParamGroup::RowsHeld(const Param& param) const {
  return RowsOfRank(param, shard_->rank());
}

at::Tensor FsdpParamGroup::ShardOf(const Param& param, const at::Tensor& full) const {
  c10::NoGradGuard no_grad;
  std::vector<int64_t> shape = param.full_shape;
  shape[0] = param.rows_per_shard;
  at::Tensor shard = at::zeros(shape, full.options());
  const int64_t count = RowsOfRank(param, shard_->rank());
  if (count > 0) {
    shard.narrow(0, 0, count).copy_(full.narrow(0, shard_->rank() * param.rows_per_shard, count));
  }
  return shard;
}

FsdpParamGroup::FlatBuffer FsdpParamGroup::FlatShards(const std::vector<at::Tensor>& shards) const {
  c10::NoGradGuard no_grad;
  FlatBuffer buffer;
  buffer.flat = at::empty({gather_numel_}, shards[0].options().dtype(param_dtype_));
  std::vector<size_t> float8;
  std::vector<at::Tensor> slots;
  std::vector<at::Tensor> sources;
  bool precomputed = !float8_scales_.empty();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].float8) {
      float8.push_back(i);
      precomputed = precomputed && float8_scale_versions_[i] == shards[i]._version();
      continue;
    }
    slots.push_back(buffer.flat.narrow(0, params_[i].gather_offset, shards[i].numel()));
    sources.push_back(shards[i].reshape(-1));
  }
  // One multi-tensor op (on CUDA, ATen's foreach kernel), not a copy per shard; it casts to
  // param_dtype_ as copy_ does. Foreach ops refuse empty lists: a group of float8 weights only.
  if (!slots.empty()) at::_foreach_copy_(slots, sources);
  if (float8.empty()) return buffer;
  if (precomputed) {
    buffer.float8_scales = float8_scales_;
  } else {
    // The whole tensors' maxima: every rank casts its shard as the gathered weight would be.
    const at::Tensor amax = at::stack(Float8ShardAmaxes());
    CheckCollective(AllReduceFloat8Amaxes(amax), "float8 amax all-reduce", *shard_);
    buffer.float8_scales = Float8ScalesOf(amax.unbind());
  }
  const at::Tensor bytes = buffer.flat.view(at::kByte);
  const int64_t element_size = static_cast<int64_t>(c10::elementSize(param_dtype_));
  for (size_t i : float8) {
    const Float8Tensor cast = CastWithScale(shards[i], at::kFloat8_e4m3fn, buffer.float8_scales[i]);
    bytes.narrow(0, params_[i].gather_offset * element_size, shards[i].numel())
        .copy_(cast.data.reshape(-1).view(at::kByte));
  }
  return buffer;
}

std::vector<at::Tensor> FsdpParamGroup::Float8ShardAmaxes() const {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> amaxes;
  for (const Param& param : params_) {
    // Padding rows are zero. One reduction with |x| inside, as the float8 linear's own amax.
    if (param.float8) {
      amaxes.push_back(
          at::linalg_vector_norm(param.shard, std::numeric_limits<double>::infinity()));
    }
  }
  return amaxes;
}

absl::Status FsdpParamGroup::AllReduceFloat8Amaxes(const at::Tensor& amaxes) const {
  TITAN_RETURN_IF_ERROR(Await(shard_->AllReduce(amaxes, ReduceOp::kMax)));
  if (float8_tensor_parallel_ == nullptr) return absl::OkStatus();
  return Await(float8_tensor_parallel_->AllReduce(amaxes, ReduceOp::kMax));
}

std::vector<at::Tensor> FsdpParamGroup::Float8ScalesOf(
    const std::vector<at::Tensor>& global_amaxes) const {
  std::vector<at::Tensor> scales(params_.size());
  size_t next = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].float8) {
      scales[i] = Float8ScaleOf(global_amaxes.at(next++), at::kFloat8_e4m3fn, false);
    }
  }
  return scales;
}

void FsdpParamGroup::SetFloat8Scales(const std::vector<at::Tensor>& global_amaxes) {
  float8_scales_ = Float8ScalesOf(global_amaxes);
  float8_scale_versions_.assign(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].float8) float8_scale_versions_[i] = params_[i].shard._version();
  }
}

std::vector<at::Tensor> FsdpParamGroup::AssembleAll(
    const at::Tensor& gathered, const std::vector<at::Tensor>& float8_scales,
    std::vector<std::optional<Float8Tensor>>* float8_casts) const {
  // One copy for the whole group (FSDP2's copy-out, a single kernel on CUDA), not one per
  // parameter and rank: each parameter's column block of `gathered` into its padded tensor.
  std::vector<int64_t> widths;
  std::vector<at::Tensor> padded;
  for (const Param& param : params_) {
    const int64_t numel = param.shard.numel();
    widths.push_back(param.float8 ? Float8Elements(numel, param_dtype_) : numel);
    padded.push_back(at::empty({gathered.size(0), widths.back()}, gathered.options()));
  }
  at::split_with_sizes_copy_out(padded, gathered, widths, 1);
  std::vector<at::Tensor> full;
  full.reserve(params_.size());
  float8_casts->assign(params_.size(), std::nullopt);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& param = params_[i];
    if (!param.float8) {
      full.push_back(FullOverPadded(param, padded[i]));
      continue;
    }
    at::Tensor bytes = padded[i].view(at::kByte);
    // Shards whose bytes do not fill whole elements of param_dtype_ end in unused bytes.
    if (bytes.size(1) != param.shard.numel()) {
      bytes = bytes.narrow(1, 0, param.shard.numel()).contiguous();
    }
    const at::Tensor data = FullOverPadded(param, bytes.view(at::kFloat8_e4m3fn));
    full.push_back(Float8WeightStandIn(param.full_shape, padded[i].options()));
    (*float8_casts)[i] = Float8Tensor{data, float8_scales[i]};
  }
  return full;
}

void FsdpParamGroup::Prefetch() {
  if (prefetched_ || held_) return;
  PhaseRange range("fsdp::all_gather");
  PendingGather pending;
  pending.sent = FlatShards(Shards());
  pending.gathered = at::empty({shard_->size(), gather_numel_}, pending.sent.flat.options());
  absl::StatusOr<std::unique_ptr<Work>> work =
      shard_->AllGather(pending.sent.flat, pending.gathered);
  CheckCollective(work.status(), "prefetch all-gather", *shard_);
  pending.work = *std::move(work);
  prefetched_ = std::move(pending);
}

void FsdpParamGroup::DropPrefetch() {
  if (!prefetched_) return;
  const absl::Status status = prefetched_->work->Wait();
  prefetched_.reset();
  CheckCollective(status, "prefetch all-gather", *shard_);
}

std::vector<at::Tensor> FsdpParamGroup::AllGatherFlat(
    const std::vector<at::Tensor>& shards,
    std::vector<std::optional<Float8Tensor>>* float8_casts) const {
  PhaseRange range("fsdp::all_gather");
  c10::NoGradGuard no_grad;
  at::Tensor gathered;
  std::vector<at::Tensor> float8_scales;
  if (prefetched_) {
    const absl::Status status = prefetched_->work->Wait();
    gathered = std::move(prefetched_->gathered);
    float8_scales = std::move(prefetched_->sent.float8_scales);
    prefetched_.reset();
    CheckCollective(status, "prefetch all-gather", *shard_);
  } else {
    FlatBuffer sent = FlatShards(shards);
    gathered = at::empty({shard_->size(), gather_numel_}, sent.flat.options());
    CheckCollective(Await(shard_->AllGather(sent.flat, gathered)), "all-gather", *shard_);
    float8_scales = std::move(sent.float8_scales);
  }
  return AssembleAll(gathered, float8_scales, float8_casts);
}

std::vector<at::Tensor> FsdpParamGroup::ReduceScatterGrads(
    const std::vector<at::Tensor>& full_grads) const {
  return FinishReduceScatter(StartReduceScatter(full_grads));
}

FsdpParamGroup::PendingReduceScatter FsdpParamGroup::StartReduceScatter(
    const std::vector<at::Tensor>& full_grads) const {
  PhaseRange range("fsdp::reduce_scatter");
  c10::NoGradGuard no_grad;
  const int size = shard_->size();
  const at::TensorOptions options = params_[0].shard.options().dtype(reduce_dtype_);
  // Row r of `input` is what rank r receives: its rows of every gradient (cast to reduce_dtype_),
  // padding zero. _chunk_cat splits dim 0 as the shards are (ceil(rows / size) rows a rank) and
  // packs the whole group in one copy (a single kernel on CUDA), not one per parameter and rank.
  std::vector<at::Tensor> grads;
  grads.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    // Autograd gives a full tensor's gradient its dtype, param_dtype_; an unused one is zero. A
    // non-contiguous one (expanded, transposed) would send the whole group off the CUDA kernel.
    grads.push_back(full_grads[i].defined()
                        ? full_grads[i].contiguous()
                        : at::zeros(params_[i].full_shape, options.dtype(param_dtype_)));
  }
  PendingReduceScatter pending;
  pending.input = at::empty({size, shard_numel_}, options);
  at::_chunk_cat_out(pending.input, grads, 0, size);
  pending.reduced = at::empty({shard_numel_}, options);
  absl::StatusOr<std::unique_ptr<Work>> work =
      shard_->ReduceScatter(pending.input.view(-1), pending.reduced, ReduceOp::kSum);
  CheckCollective(work.status(), "reduce-scatter", *shard_);
  pending.work = *std::move(work);
  return pending;
}

void FsdpParamGroup::StartReplicaAllReduce(PendingReduceScatter& pending) const {
  PhaseRange range("fsdp::reduce_scatter_wait");
  c10::NoGradGuard no_grad;
  CheckCollective(pending.work->Wait(), "reduce-scatter", *shard_);
  pending.input = at::Tensor();
  absl::StatusOr<std::unique_ptr<Work>> work =
      replicate_->AllReduce(pending.reduced, ReduceOp::kSum);
  CheckCollective(work.status(), "all-reduce", *replicate_);
  pending.work = *std::move(work);
  pending.all_reducing = true;
}

std::vector<at::Tensor> FsdpParamGroup::FinishReduceScatter(PendingReduceScatter pending) const {
  if (replicated() && !pending.all_reducing) StartReplicaAllReduce(pending);
  PhaseRange range(pending.all_reducing ? "fsdp::all_reduce_wait" : "fsdp::reduce_scatter_wait");
  c10::NoGradGuard no_grad;
  CheckCollective(pending.work->Wait(), pending.all_reducing ? "all-reduce" : "reduce-scatter",
                  pending.all_reducing ? *replicate_ : *shard_);
  at::Tensor& reduced = pending.reduced;
  const int64_t dp_size = shard_->size() * (replicated() ? replicate_->size() : 1);
  reduced.div_(static_cast<double>(dp_size));
  std::vector<at::Tensor> grads;
  grads.reserve(params_.size());
  for (const Param& param : params_) {
    grads.push_back(reduced.narrow(0, param.offset, param.shard.numel())
                        .view(param.shard.sizes())
                        .to(param.shard.scalar_type()));
  }
  return grads;
}

void FsdpParamGroup::AccumulateShardGrads(const std::vector<at::Tensor>& grads) const {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].shard.mutable_grad();
    // The first microbatch's gradient is the shard's rows of the reduce-scatter output itself,
    // as FSDP2's: that buffer is fresh each step and holds only the group's gradients (and their
    // padding), so adopting it saves a pass over the gradient bytes and keeps no more memory.
    if (!grad.defined()) {
      grad = grads[i];
    } else {
      grad.add_(grads[i]);
    }
  }
}

absl::StatusOr<at::Tensor> FsdpParamGroup::GatherFull(const Param& param,
                                                      const at::Tensor& shard_like) const {
  if (shard_like.sizes() != param.shard.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FSDP gather of ", param.name, ": expected shape ",
                     c10::str(param.shard.sizes()), ", got ", c10::str(shard_like.sizes())));
  }
  c10::NoGradGuard no_grad;
  at::Tensor flat = shard_like.detach().contiguous().view(-1);
  at::Tensor gathered = at::empty({shard_->size(), flat.numel()}, flat.options());
  TITAN_RETURN_IF_ERROR(WithContext(Await(shard_->AllGather(flat, gathered)),
                                    absl::StrCat("FSDP gather of ", param.name)));
  return FullOverPadded(param, gathered);
}

std::vector<at::Tensor> FsdpParamGroup::Shards() const {
  std::vector<at::Tensor> shards;
  shards.reserve(params_.size());
  for (const Param& param : params_) shards.push_back(param.shard);
  return shards;
}

std::vector<at::Tensor> FsdpParamGroup::Unshard() {
  const std::vector<at::Tensor> shards = Shards();
  std::vector<std::optional<Float8Tensor>> casts;
  std::vector<at::Tensor> full = AllGatherFunction::apply(at::TensorList(shards), this, &casts);
  std::vector<at::Tensor> float8_data(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    *params_[i].slot = full[i];
    if (!params_[i].float8) continue;
    RegisterFloat8Weight(full[i], *casts[i]);
    float8_data[i] = casts[i]->data;
  }
  return float8_data;
}

void FsdpParamGroup::Reshard() {
  for (const Param& param : params_) {
    if (param.float8) UnregisterFloat8Weight(*param.slot);
    *param.slot = param.shard;
  }
}

void FsdpParamGroup::Hold() {
  if (held_) return;
  DropPrefetch();
  c10::NoGradGuard no_grad;
  Unshard();
  held_ = true;
}

void FsdpParamGroup::Release() {
  if (!held_) return;
  Reshard();
  held_ = false;
}

void FsdpParamGroup::RefillFull(const std::vector<at::Tensor>& full,
                                const std::vector<at::Tensor>& float8_data,
                                std::vector<c10::Storage>* refilled) const {
  std::vector<std::optional<Float8Tensor>> casts;
  std::vector<at::Tensor> gathered = AllGatherFlat(Shards(), &casts);
  // Both are the same parameter's padded gather, or both stand-ins of one element: the same
  // layout, so the bytes move over.
  auto move_bytes = [refilled](const at::Tensor& from_tensor, const at::Tensor& to_tensor) {
    c10::StorageImpl* from = from_tensor.storage().unsafeGetStorageImpl();
    c10::StorageImpl* to = to_tensor.storage().unsafeGetStorageImpl();
    const size_t nbytes = from->nbytes();
    to->set_data_ptr_noswap(from->set_data_ptr(at::DataPtr(nullptr, from->device())));
    to->set_nbytes(nbytes);
    refilled->push_back(to_tensor.storage());
  };
  for (size_t i = 0; i < full.size(); ++i) {
    move_bytes(gathered[i], full[i]);
    // The same shards and scales as in forward: the bytes the linear saved.
    if (float8_data[i].defined()) move_bytes(casts[i]->data, float8_data[i]);
  }
}

at::Tensor FsdpParamGroup::CallUnsharded(const std::function<at::Tensor(const at::Tensor&)>& call,
                                         const at::Tensor& x, bool reshard_after_forward,
                                         FsdpParamGroup* prefetch,
                                         FsdpParamGroup* backward_prefetch) {
  if (held_) {
    // Held tensors were gathered without autograd: a gradient would never reach the shards.
    TORCH_CHECK(!c10::GradMode::is_enabled(), "FSDP group held gathered (DataParallel::",
                "GatheredScope) in a forward with autograd");
    return call(x);
  }
  const std::vector<at::Tensor> float8_data = Unshard();
  if (prefetch != nullptr) prefetch->Prefetch();
  std::vector<at::Tensor> full;
  full.reserve(params_.size());
  for (const Param& param : params_) full.push_back(*param.slot);
  at::Tensor out = call(x);
  Reshard();
  if (!reshard_after_forward || !c10::GradMode::is_enabled() || !out.requires_grad()) return out;
  // Autograd holds `full` (or views of it) and float8 linears their casts for backward; only
  // their bytes go.
  for (const at::Tensor& tensor : full) FreeStorage(tensor.storage());
  for (const at::Tensor& tensor : float8_data) {
    if (tensor.defined()) FreeStorage(tensor.storage());
  }
  // Every node of call's graph runs after the one that produced `out`: refill before them, and
  // free again when the gather's node runs after them all.
  auto refilled = std::make_shared<std::vector<c10::Storage>>();
  full[0].grad_fn()->add_pre_hook(std::make_unique<ReleaseRefilledOnGather>(refilled));
  out.register_hook([this, full, float8_data, backward_prefetch, refilled](const at::Tensor& grad) {
    RefillFull(full, float8_data, refilled.get());
    if (backward_prefetch != nullptr) backward_prefetch->Prefetch();
    return grad;
  });
  return out;
}

}  // namespace titan
