#include "io/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "meshflow/error.h"

namespace mf::io {
namespace {

constexpr size_t kMaxChunk = size_t(1) << 30;  // per read/write call

std::string temp_prefix(const std::string& base) { return detail::concat(".", base, ".tmp."); }

std::string temp_name(const std::string& directory, const std::string& base) {
  static std::atomic<uint64_t> counter{0};
  return detail::concat(directory, "/", temp_prefix(base), ::getpid(), ".", counter.fetch_add(1));
}

// Removes the temporary files of saves to base that were interrupted: those
// whose writer process no longer exists (a live process, this one included,
// may still be writing its own). Best effort: a file that cannot be removed
// stays.
void remove_stale_temps(const std::string& directory, const std::string& base) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return;
  const std::string prefix = temp_prefix(base);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const char* p = name.c_str() + prefix.size();
    char* end = nullptr;
    errno = 0;
    const long pid = std::strtol(p, &end, 10);
    if (errno != 0 || end == p || *end != '.' || pid <= 0) continue;
    if (pid == ::getpid() || ::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlinkat(::dirfd(dir), name.c_str(), 0);
  }
  ::closedir(dir);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, const char* op) : path_(std::move(path)), op_(op) {
  MF_CHECK(!path_.empty(), ValueError, op_, ": the path is empty");
  const size_t slash = path_.rfind('/');
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  MF_CHECK(!base.empty() && base != "." && base != "..", ValueError, op_, ": '", path_,
           "' names a directory, not a file");
  directory_ = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  // A name that exists already (a leftover of a killed process that had our
  // pid) is skipped; O_EXCL makes the file ours alone.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path_ = temp_name(directory_, base);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    temp_path_.clear();
    fail("cannot create a temporary file in", directory_, err);
  }
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFileWriter::fail(const char* what, const std::string& subject, int err) {
  discard();
  throw Error(detail::concat(op_, ": ", what, " '", subject, "' while saving '", path_, "': ",
                             std::strerror(err)));
}

void AtomicFileWriter::write(const void* data, size_t nbytes) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min(nbytes, kMaxChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", temp_path_, n < 0 ? errno : EIO);
    p += n;
    nbytes -= size_t(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) fail("cannot sync", temp_path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", temp_path_, errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("cannot rename the temporary file to", path_, errno);
  temp_path_.clear();
  const size_t slash = path_.rfind('/');
  remove_stale_temps(directory_, slash == std::string::npos ? path_ : path_.substr(slash + 1));
  const int dir_fd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dir_fd >= 0 && ::fsync(dir_fd) == 0;
  const int err = errno;
  if (dir_fd >= 0) ::close(dir_fd);
  MF_CHECK(synced, Error, op_, ": wrote '", path_, "' but cannot sync its directory '", directory_,
           "', so the rename may not survive a crash: ", std::strerror(err));
}

FileReader::FileReader(const std::string& path, const char* op) : path_(path), op_(op) {
  do {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  MF_CHECK(fd_ >= 0, Error, op_, ": cannot open '", path_, "': ", std::strerror(errno));
  struct stat st {};
  const char* problem = nullptr;
  if (::fstat(fd_, &st) != 0) problem = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) problem = "not a regular file";
  if (problem) {
    ::close(fd_);
    throw Error(detail::concat(op_, ": cannot read '", path_, "': ", problem));
  }
  size_ = uint64_t(st.st_size);
}

FileReader::~FileReader() { ::close(fd_); }

void FileReader::read_at(uint64_t offset, void* dst, size_t nbytes, const std::string& what) const {
  char* p = static_cast<char*>(dst);
  while (nbytes > 0) {
    const ssize_t n = ::pread(fd_, p, std::min(nbytes, kMaxChunk), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    MF_CHECK(n >= 0, Error, op_, ": cannot read ", what, " of '", path_, "': ", std::strerror(errno));
    MF_CHECK(n > 0, Error, op_, ": '", path_, "' is truncated (it ended while reading ", what, ")");
    p += n;
    nbytes -= size_t(n);
    offset += uint64_t(n);
  }
}

}  // namespace mf::io
