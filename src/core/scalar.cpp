#include "meshflow/scalar.h"

#include <sstream>

namespace mf {

std::string Scalar::str() const {
  std::ostringstream os;
  switch (kind_) {
    case Kind::Bool: os << (i_ ? "True" : "False"); break;
    case Kind::Int: os << i_; break;
    case Kind::Float: os << d_; break;
  }
  return os.str();
}

}  // namespace mf
