#ifndef TITAN_LIB_INTEROP_ORDERED_DICT_PICKLE_H_
#define TITAN_LIB_INTEROP_ORDERED_DICT_PICKLE_H_

// torch.save(model.state_dict()) pickles a collections.OrderedDict (with the module versions in its
// `_metadata` attribute), and most older pytorch_model.bin files hold one. LibTorch's unpickler
// knows that class only as a tensor's empty backward hooks and builds it as None, so the dict is
// rewritten, before unpickling, as the plain dict torch.save(dict(state_dict)) would write.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// `pickle` (which CheckStateDictPickle passed) up to its STOP, with a top-level
// collections.OrderedDict written as a plain dict holding the same items in the same order and
// without its state (`_metadata`, which no tensor needs); another pickle as it is. InvalidArgument,
// naming the byte, where an OrderedDict other than the top-level one is given items (a state dict
// nested in the dict, as {"model": model.state_dict()}), or the pickle's opcodes take objects the
// stack does not hold.
absl::StatusOr<std::string> PlainDictPickle(absl::string_view pickle);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_ORDERED_DICT_PICKLE_H_
