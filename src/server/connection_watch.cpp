// Finding a connection's socket by its endpoints and polling it (see connection_watch.h).
#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace vi::server {

namespace {
bool endpoint(int fd, bool peer, std::string& addr, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) return false;
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  addr = host;
  port = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                 : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return true;
}
}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::string la, ra;
    int lp = -1, rp = -1;
    if (!endpoint(static_cast<int>(fd), true, ra, rp) || rp != remote_port || ra != remote_addr) continue;
    if (!endpoint(static_cast<int>(fd), false, la, lp) || lp != local_port || la != local_addr) continue;
    fd_ = static_cast<int>(fd);
    break;
  }
  closedir(dir);
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace vi::server
