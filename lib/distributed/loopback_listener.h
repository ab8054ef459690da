// Tests: a socket listening on a free loopback port, for rank 0's store to take over
// (DistributedEnv::store_listen_fd), so ranks forked by a test never race for a port.

#ifndef TITAN_LIB_DISTRIBUTED_LOOPBACK_LISTENER_H_
#define TITAN_LIB_DISTRIBUTED_LOOPBACK_LISTENER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace titan {

// The listening socket, its port into *port; -1 when one cannot be opened.
inline int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_LOOPBACK_LISTENER_H_
