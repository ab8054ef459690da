#ifndef TITAN_LIB_MODEL_AUTOCAST_H_
#define TITAN_LIB_MODEL_AUTOCAST_H_

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <optional>

namespace titan {

// Sets autocast on `device_type` to `dtype` (or off when unset) for the scope, restoring the
// previous state after (LibTorch has no C++ autocast guard). Recomputation in backward uses it to
// run under the forward's state: backward may run on another thread, where autocast is off.
class AutocastScope {
 public:
  AutocastScope(at::DeviceType device_type, std::optional<at::ScalarType> dtype)
      : device_type_(device_type),
        was_enabled_(at::autocast::is_autocast_enabled(device_type)),
        previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
    if (dtype) at::autocast::set_autocast_dtype(device_type_, *dtype);
    at::autocast::set_autocast_enabled(device_type_, dtype.has_value());
  }
  ~AutocastScope() {
    at::autocast::set_autocast_enabled(device_type_, was_enabled_);
    at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
    if (!was_enabled_) at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  // The autocast dtype in effect on `device_type` now, unset when autocast is off.
  static std::optional<at::ScalarType> Current(at::DeviceType device_type) {
    if (!at::autocast::is_autocast_enabled(device_type)) return std::nullopt;
    return at::autocast::get_autocast_dtype(device_type);
  }

 private:
  at::DeviceType device_type_;
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

}  // namespace titan

#endif  // TITAN_LIB_MODEL_AUTOCAST_H_
