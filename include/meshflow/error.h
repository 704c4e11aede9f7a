// The exception family of meshflow. Every user error is one of these; the
// Python layer maps each to the matching Python exception class.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mf {

// Base of every meshflow error (Python: RuntimeError).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
// Shapes that do not fit together (Python: RuntimeError, as in PyTorch).
class ShapeError : public Error {
 public:
  using Error::Error;
};
// Wrong dtype or an unsupported dtype for an op (Python: TypeError).
class TypeError : public Error {
 public:
  using Error::Error;
};
// Index or dimension out of range (Python: IndexError).
class IndexError : public Error {
 public:
  using Error::Error;
};
// An argument value that is not allowed (Python: ValueError).
class ValueError : public Error {
 public:
  using Error::Error;
};
// A mode or case an op does not implement, where PyTorch raises
// NotImplementedError (interpolate's mode for an input rank, F.pad's
// modes; Python: NotImplementedError, itself a RuntimeError).
class NotImplementedError : public Error {
 public:
  using Error::Error;
};
// A failure between processes (Python: RuntimeError).
class DistributedError : public Error {
 public:
  using Error::Error;
};
// An allocation the device cannot serve (Python: OutOfMemoryError, a
// RuntimeError, as torch.OutOfMemoryError).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A recomputed forward that differs from the first one (activation
// checkpointing; Python: meshflow.utils.checkpoint.CheckpointError, a
// RuntimeError).
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A matrix without the property an operation needs: singular in inv or
// solve, not positive-definite in cholesky, a decomposition that did not
// converge (Python: meshflow.linalg.LinAlgError, a RuntimeError, as
// torch.linalg.LinAlgError).
class LinAlgError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mf

// MF_CHECK(cond, ErrorType, parts...): throws ErrorType(concat(parts...)) when
// cond is false. The message names the op, the argument, expected and got.
#define MF_CHECK(cond, ErrorType, ...)                          \
  do {                                                          \
    if (!(cond)) [[unlikely]]                                   \
      throw ErrorType(::mf::detail::concat(__VA_ARGS__));       \
  } while (0)
