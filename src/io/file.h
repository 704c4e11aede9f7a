// POSIX file access for checkpoints: an atomic writer and a positioned reader.
// Both throw mf::Error with the path, the operation and strerror(errno).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mf::io {

// Note [Atomic save]: a checkpoint is first written to a fresh temporary file
// in the destination's directory (same file system, so rename is atomic),
// fsync'ed, then renamed over the destination, and the directory is fsync'ed
// so the rename itself survives a crash. Until commit() succeeds the
// destination is untouched; if anything fails, or the writer is destroyed
// without commit(), the temporary file is removed. Readers therefore see the
// old file or the complete new one, never a partial write. A process killed
// mid-save leaves its temporary file (".<name>.tmp.<pid>.<n>"); the next
// successful save to the same path removes those of processes that no
// longer run.
class AtomicFileWriter {
 public:
  // op names the calling function in error messages ("save_file").
  AtomicFileWriter(std::string path, const char* op);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t nbytes);
  void commit();

 private:
  [[noreturn]] void fail(const char* what, const std::string& subject, int err);
  void discard();

  std::string path_;
  std::string directory_;
  std::string temp_path_;
  const char* op_;
  int fd_ = -1;
};

// A regular file opened for reading at explicit offsets.
class FileReader {
 public:
  FileReader(const std::string& path, const char* op);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly nbytes at offset; a short read (the file shrank) throws,
  // describing what was being read.
  void read_at(uint64_t offset, void* dst, size_t nbytes, const std::string& what) const;

 private:
  std::string path_;
  const char* op_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace mf::io
