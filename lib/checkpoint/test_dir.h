#ifndef TITAN_LIB_CHECKPOINT_TEST_DIR_H_
#define TITAN_LIB_CHECKPOINT_TEST_DIR_H_

#include <string>

namespace titan {

// An empty directory path for the running gtest case: $TEST_TMPDIR/<test name>/<name>, removed first.
std::string TestDir(const std::string& name);

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_TEST_DIR_H_
