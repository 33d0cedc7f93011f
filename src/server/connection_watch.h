// Tells whether the client of a request has hung up, so a non-streaming request whose
// client is gone stops generating (cpp-httplib 0.11 exposes no socket to handlers and
// notices a dead peer only when it writes). The socket is found once by its TCP
// endpoints (local and remote address:port, unique among live connections) and then
// polled for an orderly or abortive close (POLLRDHUP/POLLHUP/POLLERR). Linux only.
#pragma once

#include <string>

namespace vi::server {

class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  // True once the peer has closed the connection (false when the socket was not found).
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace vi::server
