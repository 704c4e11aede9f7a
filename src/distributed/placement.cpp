#include "meshflow/distributed/placement.h"

#include <algorithm>
#include <set>

#include "meshflow/error.h"

namespace mf {

Sbp Sbp::split(int64_t axis) {
  MF_CHECK(axis >= 0, ValueError, "sbp.split: axis must be >= 0, got ", axis);
  return Sbp(Kind::Split, axis);
}

std::string Sbp::str() const {
  switch (kind_) {
    case Kind::Split:
      return "S(" + std::to_string(axis_) + ")";
    case Kind::Broadcast:
      return "B";
    case Kind::PartialSum:
      return "P";
  }
  return "?";
}

std::string nd_sbp_str(const NdSbp& sbp) {
  std::string out = "(";
  for (size_t i = 0; i < sbp.size(); ++i) out += (i ? ", " : "") + sbp[i].str();
  return out + (sbp.size() == 1 ? ",)" : ")");
}

Placement::Placement(DeviceType type, std::vector<int> ranks, Shape hierarchy)
    : type_(type), ranks_(std::move(ranks)), hierarchy_(std::move(hierarchy)) {
  MF_CHECK(!ranks_.empty(), ValueError, "placement: the rank list is empty");
  std::set<int> seen;
  for (int r : ranks_) {
    MF_CHECK(r >= 0, ValueError, "placement: ranks must be >= 0, got ", r);
    MF_CHECK(seen.insert(r).second, ValueError, "placement: rank ", r, " appears twice");
  }
  if (hierarchy_.empty()) hierarchy_ = {int64_t(ranks_.size())};
  for (int64_t d : hierarchy_) MF_CHECK(d > 0, ValueError, "placement: mesh dims must be positive, got ", shape_str(hierarchy_));
  MF_CHECK(shape_numel(hierarchy_) == int64_t(ranks_.size()), ValueError, "placement: a mesh of shape ",
           shape_str(hierarchy_), " needs ", shape_numel(hierarchy_), " ranks, got ", ranks_.size());
}

bool Placement::contains(int world_rank) const {
  return std::find(ranks_.begin(), ranks_.end(), world_rank) != ranks_.end();
}

std::vector<int64_t> Placement::coords(int world_rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), world_rank);
  MF_CHECK(it != ranks_.end(), ValueError, "placement: rank ", world_rank, " is not in ", str());
  int64_t flat = it - ranks_.begin();
  std::vector<int64_t> c(hierarchy_.size());
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    c[size_t(d)] = flat % hierarchy_[size_t(d)];
    flat /= hierarchy_[size_t(d)];
  }
  return c;
}

int Placement::rank_at(const std::vector<int64_t>& coords) const {
  MF_CHECK(int64_t(coords.size()) == ndim(), ValueError, "placement: expected ", ndim(), " mesh coordinates, got ",
           coords.size());
  int64_t flat = 0;
  for (size_t d = 0; d < coords.size(); ++d) {
    MF_CHECK(coords[d] >= 0 && coords[d] < hierarchy_[d], IndexError, "placement: coordinate ", coords[d],
             " out of range for mesh axis ", d, " of size ", hierarchy_[d]);
    flat = flat * hierarchy_[d] + coords[d];
  }
  return ranks_[size_t(flat)];
}

std::vector<int> Placement::axis_group(int world_rank, int64_t axis) const {
  MF_CHECK(axis >= 0 && axis < ndim(), IndexError, "placement: mesh axis ", axis, " out of range for a ", ndim(),
           "-D mesh");
  std::vector<int64_t> c = coords(world_rank);
  std::vector<int> group;
  for (int64_t i = 0; i < hierarchy_[size_t(axis)]; ++i) {
    c[size_t(axis)] = i;
    group.push_back(rank_at(c));
  }
  return group;
}

std::string Placement::str() const {
  // Nested lists in mesh order.
  std::string text;
  auto emit = [&](auto&& self, size_t dim, int64_t offset) -> void {
    text += "[";
    int64_t stride = 1;
    for (size_t d = dim + 1; d < hierarchy_.size(); ++d) stride *= hierarchy_[d];
    for (int64_t i = 0; i < hierarchy_[dim]; ++i) {
      if (i) text += ", ";
      if (dim + 1 == hierarchy_.size()) {
        text += std::to_string(ranks_[size_t(offset + i)]);
      } else {
        self(self, dim + 1, offset + i * stride);
      }
    }
    text += "]";
  };
  emit(emit, 0, 0);
  return "placement(type=\"" + std::string(device_type_name(type_)) + "\", ranks=" + text + ")";
}

std::pair<int64_t, int64_t> split_range(int64_t n, int64_t parts, int64_t index) {
  MF_CHECK(parts > 0 && index >= 0 && index < parts, IndexError, "split_range: part ", index, " of ", parts);
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

void check_nd_sbp(const NdSbp& sbp, const Placement& placement, int64_t ndim, const char* what) {
  MF_CHECK(int64_t(sbp.size()) == placement.ndim(), ValueError, what, ": the sbp ", nd_sbp_str(sbp), " has ",
           sbp.size(), " entries but the placement's mesh has ", placement.ndim(), " axes");
  for (const Sbp& s : sbp) {
    MF_CHECK(!s.is_split() || s.axis() < ndim, IndexError, what, ": split axis ", s.axis(),
             " is out of range for a tensor of ", ndim, " dims");
  }
}

Shape local_shape(const Shape& global, const NdSbp& sbp, const Placement& placement,
                  const std::vector<int64_t>& coords) {
  Shape shape = global;
  for (size_t a = 0; a < sbp.size(); ++a) {
    if (!sbp[a].is_split()) continue;
    int64_t& d = shape[size_t(sbp[a].axis())];
    auto [begin, end] = split_range(d, placement.hierarchy()[a], coords[a]);
    d = end - begin;
  }
  return shape;
}

}  // namespace mf
