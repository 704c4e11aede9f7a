// Saving is atomic: on failure the destination keeps its old content and no
// temporary file is left behind (Note [Atomic save] in src/io/file.h).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io_test_util.h"

namespace mf {
namespace {
using io::load_file;
using io::save_file;
using testing::read_bytes;
using testing::ScratchDir;

std::map<std::string, Tensor> small_tensors() { return {{"w", from_vector({1, 2, 3}, {3})}}; }

TEST(AtomicSave, OverwritesAndLeavesNoTemporaryFile) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_file(small_tensors(), path);
  save_file({{"v", from_vector({4, 5}, {2}, {.dtype = kInt64})}}, path, {{"step", "2"}});
  auto [tensors, metadata] = load_file(path);
  ASSERT_EQ(tensors.count("v"), 1u);
  EXPECT_EQ(tensors.count("w"), 0u);
  testing::expect_values(tensors.at("v"), {4, 5});
  EXPECT_EQ(metadata.at("step"), "2");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(AtomicSave, RelativePathAndFilePermissions) {
  ScratchDir dir;
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(dir.path());
  const mode_t old_mask = ::umask(022);
  EXPECT_NO_THROW(save_file(small_tensors(), "relative.safetensors"));
  ::umask(old_mask);
  std::filesystem::current_path(cwd);
  testing::expect_values(load_file(dir.file("relative.safetensors")).first.at("w"), {1, 2, 3});
  // Created like any new file (0666 less the umask), not 0600 like a mkstemp file.
  const auto perms = std::filesystem::status(dir.file("relative.safetensors")).permissions();
  EXPECT_EQ(perms, std::filesystem::perms(0644));
}

TEST(AtomicSave, RenameFailureLeavesTheDestinationAlone) {
  ScratchDir dir;
  // The destination is a non-empty directory: writing the temporary file
  // works, the rename over the destination fails.
  std::filesystem::create_directory(dir.file("taken"));
  testing::write_bytes(dir.file("taken/inside"), "keep");
  const std::string msg = testing::error_of([&] { save_file(small_tensors(), dir.file("taken")); });
  EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
  EXPECT_NE(msg.find("taken"), std::string::npos) << msg;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
  EXPECT_EQ(read_bytes(dir.file("taken/inside")), "keep");
}

TEST(AtomicSave, MissingDirectoryAndBadPaths) {
  ScratchDir dir;
  const std::string msg = testing::error_of([&] { save_file(small_tensors(), dir.file("no/such/dir/x.safetensors")); });
  EXPECT_NE(msg.find("cannot create a temporary file"), std::string::npos) << msg;
  EXPECT_THROW(save_file(small_tensors(), ""), ValueError);
  EXPECT_THROW(save_file(small_tensors(), dir.path() + "/"), ValueError);
  EXPECT_THROW(save_file(small_tensors(), dir.path() + "/.."), ValueError);
  EXPECT_TRUE(dir.entries().empty());
}

// A write that fails part way (the file size limit) keeps the old file.
TEST(AtomicSave, FailedWriteKeepsTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  save_file(small_tensors(), path);
  const std::string before = read_bytes(path);
  const Tensor big = zeros({256, 1024});  // 1 MiB

  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 * 1024;
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::string msg;
  bool threw_error = false;
  try {
    save_file({{"big", big}}, path);
  } catch (const Error& e) {
    threw_error = true;
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);

  ASSERT_TRUE(threw_error);
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});
}

// Saving into a directory without write permission throws and keeps the old
// file. Permissions do not bind root, so as root the save runs in a child
// process that has dropped to the "nobody" user.
TEST(AtomicSave, ReadOnlyDirectory) {
  ScratchDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  std::filesystem::create_directory(dir.file("ro"));
  const std::string path = dir.file("ro/ckpt.safetensors");
  save_file(small_tensors(), path);
  const std::string before = read_bytes(path);
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms(0555));
  const Tensor replacement = from_vector({7, 8}, {2});

  enum Outcome { kThrewError = 10, kNoThrow, kOtherException, kCannotDropPrivileges };
  int outcome;
  if (::geteuid() != 0) {
    try {
      save_file({{"x", replacement}}, path);
      outcome = kNoThrow;
    } catch (const Error&) {
      outcome = kThrewError;
    } catch (...) {
      outcome = kOtherException;
    }
  } else {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(kCannotDropPrivileges);
      try {
        save_file({{"x", replacement}}, path);
        ::_exit(kNoThrow);
      } catch (const Error&) {
        ::_exit(kThrewError);
      } catch (...) {
        ::_exit(kOtherException);
      }
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    outcome = WEXITSTATUS(status);
  }
  std::filesystem::permissions(dir.file("ro"), std::filesystem::perms(0755));
  if (outcome == kCannotDropPrivileges) GTEST_SKIP() << "running as root and cannot switch to uid 65534";
  EXPECT_EQ(outcome, kThrewError);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries("ro"), std::vector<std::string>{"ckpt.safetensors"});
}

}  // namespace
}  // namespace mf
