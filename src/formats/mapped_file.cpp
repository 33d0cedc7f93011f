// mmap-based MappedFile (POSIX).
#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace vi::formats {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(fmt::format("{}: not a regular file", path));
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    // Read-only and shared: pages come from the page cache and cost no private memory,
    // so a 50 GB model maps without being copied. Writing through a view faults.
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      m->size_ = 0;
      throw FormatError(fmt::format("{}: mmap failed: {}", path, std::strerror(err)));
    }
    m->data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

ByteSource source_from_file(const std::string& path) {
  auto m = MappedFile::open(path);
  ByteSource s;
  s.data = m->data();
  s.size = m->size();
  s.name = path;
  s.owner = std::move(m);
  return s;
}

}  // namespace vi::formats
