// DataStream: buffered stdio writer with per-tensor accounting.
#include "formats/data_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace vi::formats {

DataStream::DataStream(std::string path, size_t alignment)
    : path_(std::move(path)), alignment_(alignment ? alignment : 1) {
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_) VI_FAIL("{}: cannot create: {}", path_, std::strerror(errno));
}

DataStream::~DataStream() {
  if (f_) std::fclose(f_);
}

size_t DataStream::declare(const std::string& name, size_t nbytes) {
  VI_CHECK(!data_started_, "{}: tensor '{}' declared after tensor data started", path_, name);
  size_t off = (data_end_ + alignment_ - 1) / alignment_ * alignment_;
  items_.push_back({name, nbytes, off});
  data_end_ = off + nbytes;
  return off;
}

void DataStream::write_raw(const void* p, size_t n) {
  VI_CHECK(f_ != nullptr, "{}: write after finish", path_);
  if (n && std::fwrite(p, 1, n, f_) != n)
    VI_FAIL("{}: write failed: {}", path_, std::strerror(errno));
  file_pos_ += n;
}

void DataStream::pad_to(size_t alignment) {
  static const char zeros[64] = {};
  size_t target = (file_pos_ + alignment - 1) / alignment * alignment;
  while (file_pos_ < target) write_raw(zeros, std::min(sizeof(zeros), target - file_pos_));
}

void DataStream::advance() {
  while (cur_ < items_.size() && cur_written_ == items_[cur_].nbytes) {
    ++cur_;
    cur_written_ = 0;
  }
}

void DataStream::expect_next(const std::string& name, size_t nbytes) {
  // Like advance(), but stops at a zero-byte tensor of this name instead of skipping it.
  while (cur_ < items_.size() && cur_written_ == items_[cur_].nbytes &&
         !(items_[cur_].nbytes == 0 && items_[cur_].name == name)) {
    ++cur_;
    cur_written_ = 0;
  }
  VI_CHECK(cur_ < items_.size(), "{}: tensor '{}' written but all declared tensors are done", path_, name);
  const Item& it = items_[cur_];
  VI_CHECK(it.name == name && cur_written_ == 0, "{}: tensor '{}' written out of order (expected '{}')",
           path_, name, it.name);
  VI_CHECK(it.nbytes == nbytes, "{}: tensor '{}' has {} bytes, declared {}", path_, name, nbytes, it.nbytes);
}

void DataStream::write_data(const void* p, size_t n) {
  if (!data_started_) {
    data_started_ = true;
    data_start_ = file_pos_;
  }
  const auto* bytes = static_cast<const uint8_t*>(p);
  while (n > 0) {
    advance();  // the chunk goes to the first tensor that still has room
    VI_CHECK(cur_ < items_.size(), "{}: more tensor data written than declared", path_);
    const Item& it = items_[cur_];
    if (cur_written_ == 0) {
      static const char zeros[64] = {};
      size_t target = data_start_ + it.offset;
      while (file_pos_ < target) write_raw(zeros, std::min(sizeof(zeros), target - file_pos_));
    }
    size_t take = std::min(n, it.nbytes - cur_written_);
    write_raw(bytes, take);
    bytes += take;
    n -= take;
    cur_written_ += take;
  }
}

void DataStream::finish() {
  advance();
  VI_CHECK(cur_ == items_.size(), "{}: tensor '{}' has {} of {} bytes written", path_,
           items_[cur_].name, cur_written_, items_[cur_].nbytes);
  // Pad the file so the last tensor is followed by alignment padding, as llama.cpp does.
  if (data_started_) pad_to(alignment_);
  if (std::fflush(f_) != 0 || std::fclose(f_) != 0) {
    f_ = nullptr;
    VI_FAIL("{}: write failed: {}", path_, std::strerror(errno));
  }
  f_ = nullptr;
}

}  // namespace vi::formats
