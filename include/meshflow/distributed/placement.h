// The global view's annotations: where a global tensor lives (Placement: a
// device type and a mesh of ranks) and how it is laid out over that mesh
// (one Sbp per mesh axis: split along a tensor dim, broadcast, or partial
// sum), as in OneFlow.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshflow/device.h"
#include "meshflow/tensor.h"

namespace mf {

class Sbp {
 public:
  enum class Kind : uint8_t { Split, Broadcast, PartialSum };
  // Split along tensor dim `axis` (>= 0).
  static Sbp split(int64_t axis);
  static Sbp broadcast() { return Sbp(Kind::Broadcast, -1); }
  static Sbp partial_sum() { return Sbp(Kind::PartialSum, -1); }

  Kind kind() const { return kind_; }
  bool is_split() const { return kind_ == Kind::Split; }
  bool is_broadcast() const { return kind_ == Kind::Broadcast; }
  bool is_partial_sum() const { return kind_ == Kind::PartialSum; }
  // The split dim; -1 unless is_split().
  int64_t axis() const { return axis_; }
  // "S(0)", "B", "P".
  std::string str() const;
  bool operator==(const Sbp& other) const = default;

 private:
  Sbp(Kind kind, int64_t axis) : kind_(kind), axis_(axis) {}
  Kind kind_;
  int64_t axis_;
};

// One Sbp per mesh axis.
using NdSbp = std::vector<Sbp>;
std::string nd_sbp_str(const NdSbp& sbp);  // "(S(0), B)"

class Placement {
 public:
  // ranks: world ranks, in row-major order of the mesh `hierarchy`; an empty
  // hierarchy means the 1-D mesh {ranks.size()}. Throws ValueError for an
  // empty or repeated rank list, negative ranks, or a mesh whose size is not
  // the number of ranks.
  Placement(DeviceType type, std::vector<int> ranks, Shape hierarchy = {});

  DeviceType type() const { return type_; }
  const std::vector<int>& ranks() const { return ranks_; }
  const Shape& hierarchy() const { return hierarchy_; }
  int64_t ndim() const { return int64_t(hierarchy_.size()); }
  int64_t size() const { return int64_t(ranks_.size()); }
  bool contains(int world_rank) const;
  // Mesh coordinates of a member; throws ValueError for a non-member.
  std::vector<int64_t> coords(int world_rank) const;
  // The world rank at mesh coordinates.
  int rank_at(const std::vector<int64_t>& coords) const;
  // The members that share every mesh coordinate with world_rank except
  // along `axis`, in order of that coordinate: the group of one boxing step.
  std::vector<int> axis_group(int world_rank, int64_t axis) const;
  // placement(type="cpu", ranks=[[0, 1], [2, 3]])
  std::string str() const;
  bool operator==(const Placement& other) const = default;

 private:
  DeviceType type_;
  std::vector<int> ranks_;
  Shape hierarchy_;
};

// [begin, end) of part `index` when n items are cut into `parts` parts whose
// sizes differ by at most one, the larger parts first (OneFlow's balanced
// split): 10 over 4 is 3, 3, 2, 2.
std::pair<int64_t, int64_t> split_range(int64_t n, int64_t parts, int64_t index);

// Checks that sbp fits a tensor of `ndim` dims on placement (one entry per
// mesh axis, split axes in range); throws ValueError / IndexError naming
// `what`.
void check_nd_sbp(const NdSbp& sbp, const Placement& placement, int64_t ndim, const char* what);

// The shape of the local tensor at mesh coordinates `coords` of a global
// tensor: the global shape cut by each mesh axis's split in axis order.
Shape local_shape(const Shape& global, const NdSbp& sbp, const Placement& placement,
                  const std::vector<int64_t>& coords);

}  // namespace mf
