#ifndef TITAN_LIB_TRAIN_HOST_HEAP_H_
#define TITAN_LIB_TRAIN_HOST_HEAP_H_

#include <cstdint>

namespace titan {

// [training] gc_freq, shared by titan_train and titan_rl: C++ has no garbage collector to run, so
// after every gc_freq-th step the host heap's freed memory goes back to the system (malloc_trim).
// Returns whether `step` did.
bool ReturnFreedHostHeapAtStep(int64_t step, int64_t gc_freq);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_HOST_HEAP_H_
