// index (t[indices]) and index_put_ (t[indices] = value), checked against a
// reference of PyTorch's indexing rules written here, on hand-picked and
// randomly generated indices.
#include "ops/host_ref.h"

namespace mf {
namespace {
using namespace testing;

// --- the reference -----------------------------------------------------------------------

// One entry per dim of x (plus new axes), after Ellipsis and masks expand.
struct RefItem {
  enum Kind { Int, Range, NewDim, Array } kind;
  int64_t value = 0;               // Int
  std::vector<int64_t> positions;  // Range
  Host array{Shape{}};             // Array
};

// For every element of t[indices] (row-major): the coordinates in x it reads.
struct RefIndex {
  Shape result_shape;
  std::vector<Shape> sources;
};

RefIndex reference_index(const Shape& xs, const std::vector<TensorIndex>& indices) {
  int64_t consumed = 0;
  for (const auto& e : indices) {
    if (std::holds_alternative<int64_t>(e) || std::holds_alternative<Slice>(e)) consumed++;
    if (auto* t = std::get_if<Tensor>(&e)) consumed += t->dtype() == kBool ? t->dim() : 1;
  }
  std::vector<RefItem> items;
  int64_t d = 0;
  auto full = [&](int64_t n) {
    for (int64_t k = 0; k < n; ++k, ++d) {
      RefItem it{RefItem::Range};
      for (int64_t p = 0; p < xs[size_t(d)]; ++p) it.positions.push_back(p);
      items.push_back(it);
    }
  };
  for (const auto& e : indices) {
    if (auto* i = std::get_if<int64_t>(&e)) {
      items.push_back({RefItem::Int, *i < 0 ? *i + xs[size_t(d)] : *i});
      ++d;
    } else if (auto* s = std::get_if<Slice>(&e)) {
      const int64_t n = xs[size_t(d++)];
      int64_t lo = s->start.value_or(0), hi = s->stop.value_or(n);
      if (lo < 0) lo += n;
      if (hi < 0) hi += n;
      lo = std::clamp<int64_t>(lo, 0, n);
      hi = std::clamp<int64_t>(hi, 0, n);
      RefItem it{RefItem::Range};
      for (int64_t p = lo; p < hi; p += s->step) it.positions.push_back(p);
      items.push_back(it);
    } else if (std::holds_alternative<NewAxis>(e)) {
      items.push_back({RefItem::NewDim});
    } else if (std::holds_alternative<Ellipsis>(e)) {
      full(int64_t(xs.size()) - consumed);
    } else {
      const Tensor& t = std::get<Tensor>(e);
      Host h(t);
      if (t.dtype() != kBool) {
        RefItem it{RefItem::Array};
        it.array = h;
        for (auto& v : it.array.v)
          if (v < 0) v += double(xs[size_t(d)]);
        items.push_back(it);
        ++d;
        continue;
      }
      // A mask: one array per masked dim, the coordinates of its true elements.
      std::vector<RefItem> arrays(size_t(t.dim()), RefItem{RefItem::Array});
      for (auto& a : arrays) a.array = Host(Shape{0});
      for (int64_t f = 0; f < h.numel(); ++f) {
        if (h.v[size_t(f)] == 0) continue;
        Shape c = unravel(f, h.shape);
        for (size_t j = 0; j < arrays.size(); ++j) arrays[j].array.v.push_back(double(c[j]));
      }
      for (auto& a : arrays) {
        a.array.shape = {int64_t(a.array.v.size())};
        items.push_back(a);
      }
      d += t.dim();
    }
  }
  full(int64_t(xs.size()) - d);

  // Ints apply first (PyTorch), then the arrays' broadcast shape B goes where
  // the arrays are if they are adjacent, else in front.
  std::vector<size_t> kept, arrays;
  Shape b;
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].kind == RefItem::Int) continue;
    if (items[k].kind == RefItem::Array) {
      arrays.push_back(kept.size());
      b = broadcast_shapes(b, items[k].array.shape);
    }
    kept.push_back(k);
  }
  const bool adjacent = arrays.empty() || arrays.back() - arrays.front() + 1 == arrays.size();
  const size_t b_at = arrays.empty() ? 0 : adjacent ? arrays.front() : 0;
  RefIndex out;
  std::vector<size_t> basic;  // kept positions of non-array items, in order
  for (size_t j = 0; j < kept.size(); ++j)
    if (items[kept[j]].kind != RefItem::Array) basic.push_back(j);
  auto basic_size = [&](size_t j) -> int64_t {
    const RefItem& it = items[kept[j]];
    return it.kind == RefItem::NewDim ? 1 : int64_t(it.positions.size());
  };
  size_t basic_before = 0;
  if (adjacent)
    for (size_t j : basic) basic_before += j < b_at;
  for (size_t k = 0; k < basic_before; ++k) out.result_shape.push_back(basic_size(basic[k]));
  if (!arrays.empty()) out.result_shape.insert(out.result_shape.end(), b.begin(), b.end());
  for (size_t k = basic_before; k < basic.size(); ++k) out.result_shape.push_back(basic_size(basic[k]));

  const int64_t nb = arrays.empty() ? 0 : int64_t(b.size());
  for (int64_t f = 0; f < shape_numel(out.result_shape); ++f) {
    Shape o = unravel(f, out.result_shape);
    Shape bi(o.begin() + int64_t(basic_before), o.begin() + int64_t(basic_before) + nb);
    Shape coords_basic(o.begin(), o.begin() + int64_t(basic_before));
    coords_basic.insert(coords_basic.end(), o.begin() + int64_t(basic_before) + nb, o.end());
    Shape src;
    size_t next_basic = 0;
    for (const RefItem& it : items) {
      switch (it.kind) {
        case RefItem::Int: src.push_back(it.value); break;
        case RefItem::Range: src.push_back(it.positions[size_t(coords_basic[next_basic++])]); break;
        case RefItem::NewDim: next_basic++; break;
        case RefItem::Array: {
          Shape ai(it.array.shape.size());
          for (size_t j = 0; j < ai.size(); ++j)
            ai[j] = it.array.shape[j] == 1 ? 0 : bi[bi.size() - ai.size() + j];
          src.push_back(int64_t(it.array.at(ai)));
          break;
        }
      }
    }
    out.sources.push_back(src);
  }
  return out;
}

Host reference_get(const Host& x, const std::vector<TensorIndex>& indices) {
  RefIndex r = reference_index(x.shape, indices);
  Host out(r.result_shape);
  for (size_t f = 0; f < r.sources.size(); ++f) out.v[f] = x.at(r.sources[f]);
  return out;
}

// x after x[indices] = value (+= when accumulate); value broadcast to the result.
Host reference_put(const Host& x, const std::vector<TensorIndex>& indices, const Host& value, bool accumulate) {
  RefIndex r = reference_index(x.shape, indices);
  Host out = x;
  Shape vs = value.shape;
  for (size_t f = 0; f < r.sources.size(); ++f) {
    Shape o = unravel(int64_t(f), r.result_shape), vi(vs.size());
    for (size_t j = 0; j < vs.size(); ++j) vi[j] = vs[j] == 1 ? 0 : o[o.size() - vs.size() + j];
    double v = value.at(vi);
    if (accumulate) out.at(r.sources[f]) += v;
    else out.at(r.sources[f]) = v;
  }
  return out;
}

std::vector<TensorIndex> I(std::initializer_list<TensorIndex> list) { return list; }
Tensor longs(std::vector<int64_t> v, Shape s) { return from_data(v, s); }
Tensor mask_of(std::vector<double> v, Shape s) { return from_vector(v, s, {.dtype = kBool}); }

// --- hand-picked cases -------------------------------------------------------------------

TEST(Index, BasicIsAView) {
  Tensor x = reshape(from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {12}), {3, 4});
  Tensor row = index(x, I({int64_t(1)}));
  EXPECT_TRUE(row.shares_storage(x));
  expect_values(row, {4, 5, 6, 7});
  expect_values(index(x, I({Slice{}, int64_t(-1)})), {3, 7, 11});
  expect_values(index(x, I({Slice{1, {}, 1}, Slice{{}, {}, 2}})), {4, 6, 8, 10});
  expect_values(index(x, I({Slice{-2, -1, 1}})), {4, 5, 6, 7});
  EXPECT_EQ(index(x, I({NewAxis{}, Ellipsis{}, NewAxis{}})).sizes(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(index(x, I({Ellipsis{}, int64_t(0)})).sizes(), (Shape{3}));
  EXPECT_EQ(index(x, I({Slice{5, {}, 1}})).sizes(), (Shape{0, 4}));
  EXPECT_EQ(index(x, I({int64_t(0), int64_t(0)})).dim(), 0);
  expect_values(index(x, {}), values(x));
  Tensor v = index(x, I({Slice{{}, {}, 2}, int64_t(1)}));
  fill_(v, -1.0);
  expect_values(x, {0, -1, 2, 3, 4, 5, 6, 7, 8, -1, 10, 11});
}

TEST(Index, IntegerTensorsAndMasks) {
  Tensor x = reshape(from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {12}), {3, 4});
  Tensor r = index(x, I({longs({2, 0, -1}, {3})}));
  EXPECT_FALSE(r.shares_storage(x));
  expect_values(r, {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(index(x, I({longs({0, 2}, {2}), longs({1, 3}, {2})})), {1, 11});
  // Broadcast index tensors: (2, 1) with (2,) -> (2, 2).
  Tensor b = index(x, I({longs({0, 2}, {2, 1}), longs({0, 3}, {2})}));
  EXPECT_EQ(b.sizes(), (Shape{2, 2}));
  expect_values(b, {0, 3, 8, 11});
  expect_values(index(x, I({Slice{}, longs({3, 0}, {2})})), {3, 0, 7, 4, 11, 8});
  expect_values(index(x, I({mask_of({1, 0, 1}, {3})})), {0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(index(x, I({mask_of({0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {3, 4})})), {1, 6, 11});
  expect_values(index(x, I({Slice{}, mask_of({1, 0, 0, 1}, {4})})), {0, 3, 4, 7, 8, 11});
  // A 0-d bool adds a dim of size 1 (true) or 0 (false).
  EXPECT_EQ(index(x, I({full({}, true, {.dtype = kBool})})).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(index(x, I({full({}, false, {.dtype = kBool})})).sizes(), (Shape{0, 3, 4}));
  // uint8 tensors are masks, as in PyTorch.
  expect_values(index(x, I({from_data<uint8_t>({0, 1, 0}, {3})})), {4, 5, 6, 7});
  expect_values(index(x, I({from_data<uint8_t>({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {3, 4})})), {0, 11});
  // int32 and int8 indices work like int64.
  expect_values(index(x, I({from_data<int32_t>({1}, {1}), from_data<int8_t>({-1}, {1})})), {7});
}

TEST(Index, AdvancedDimsPlacement) {
  Tensor x = random_tensor({2, 3, 4, 5}, 1);
  Tensor i = longs({0, 1}, {2});
  // Adjacent advanced indices keep their place; separated ones go first.
  EXPECT_EQ(index(x, I({Slice{}, i, i})).sizes(), (Shape{2, 2, 5}));
  EXPECT_EQ(index(x, I({i, Slice{}, i})).sizes(), (Shape{2, 3, 5}));
  EXPECT_EQ(index(x, I({Slice{}, i, Slice{}, i})).sizes(), (Shape{2, 2, 4}));
  // Ints apply first (PyTorch): x[0, :, i] keeps i in place, unlike NumPy.
  EXPECT_EQ(index(x, I({int64_t(0), Slice{}, i})).sizes(), (Shape{3, 2, 5}));
  EXPECT_EQ(index(x, I({i, NewAxis{}, i})).sizes(), (Shape{2, 1, 4, 5}));
  Host h(x);
  for (auto idx : {I({Slice{}, i, i}), I({i, Slice{}, i}), I({int64_t(1), Slice{}, i, Slice{1, 4, 2}}),
                   I({Ellipsis{}, i, NewAxis{}}), I({i, int64_t(2), i})}) {
    expect_host(index(x, idx), reference_get(h, idx));
  }
}

TEST(Index, EveryDtype) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 4}, 2, dt);
    Host h(x);
    for (auto idx : {I({longs({2, 0}, {2})}), I({Slice{}, longs({1, 1, 3}, {3})}),
                     I({mask_of({1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0}, {3, 4})}), I({int64_t(1), Slice{1, 3, 1}})}) {
      Tensor got = index(non_contiguous(x), idx);
      EXPECT_EQ(got.dtype(), dt);
      expect_host(got, reference_get(h, idx));
    }
  }
}

TEST(Index, BadIndices) {
  Tensor x = zeros({3, 4});
  EXPECT_THROW(index(x, I({int64_t(3)})), IndexError);
  EXPECT_THROW(index(x, I({int64_t(-4)})), IndexError);
  EXPECT_THROW(index(x, I({Slice{}, int64_t(4)})), IndexError);
  EXPECT_THROW(index(x, I({longs({0, 3}, {2})})), IndexError);
  EXPECT_THROW(index(x, I({longs({-4}, {1})})), IndexError);
  EXPECT_THROW(index(x, I({Slice{}, longs({4}, {1})})), IndexError);
  EXPECT_THROW(index(zeros({0, 2}), I({longs({0}, {1})})), IndexError);
  EXPECT_THROW(index(x, I({int64_t(0), int64_t(0), int64_t(0)})), IndexError);
  EXPECT_THROW(index(x, I({Ellipsis{}, Ellipsis{}})), IndexError);
  EXPECT_THROW(index(x, I({zeros({1})})), IndexError);  // float index
  EXPECT_THROW(index(x, I({mask_of({1, 0}, {2})})), IndexError);
  EXPECT_THROW(index(x, I({Slice{}, mask_of({1, 0, 1}, {3})})), IndexError);
  EXPECT_THROW(index(x, I({mask_of(std::vector<double>(12, 1), {4, 3})})), IndexError);
  EXPECT_THROW(index(x, I({longs({0, 1}, {2}), longs({0, 1, 2}, {3})})), IndexError);
  EXPECT_THROW(index(x, I({Slice{{}, {}, 0}})), ValueError);
  EXPECT_THROW(index(x, I({Slice{{}, {}, -1}})), ValueError);
  EXPECT_THROW(index(x, I({Tensor()})), IndexError);
  EXPECT_THROW(index(zeros({}), I({int64_t(0)})), IndexError);
}

// --- random cases --------------------------------------------------------------------------

struct RandomCase {
  Shape shape;
  std::vector<TensorIndex> indices;
};

RandomCase random_case(std::mt19937& gen) {
  auto pick = [&](int n) { return int(gen() % uint32_t(n)); };
  RandomCase c;
  const int nd = 1 + pick(4);
  for (int d = 0; d < nd; ++d) c.shape.push_back(pick(20) == 0 ? 0 : 1 + pick(4));
  // B: the broadcast shape integer indices are drawn from.
  Shape b;
  for (int k = pick(3); k > 0; --k) b.push_back(1 + pick(3));
  bool has_mask = false;
  std::vector<TensorIndex> items;
  int d = 0;
  while (d < nd) {
    const int64_t n = c.shape[size_t(d)];
    const int kind = pick(10);
    if (kind < 2 && n > 0) {  // int
      items.push_back(int64_t(pick(int(2 * n))) - n);
      ++d;
    } else if (kind < 4) {  // slice
      auto bound = [&]() -> std::optional<int64_t> {
        if (pick(2) == 0) return std::nullopt;
        return int64_t(pick(int(2 * n + 3))) - n - 1;
      };
      items.push_back(Slice{bound(), bound(), 1 + pick(3)});
      ++d;
    } else if (kind < 7 && n > 0) {  // integer tensor, shaped from a suffix of B
      Shape s(b.end() - pick(int(b.size()) + 1), b.end());
      for (auto& e : s)
        if (pick(3) == 0) e = 1;
      static const DType kIndexTypes[] = {kInt64, kInt32, kInt16, kInt8};
      items.push_back(to(random_indices(s, -n, n, uint32_t(gen())), kIndexTypes[pick(4)]));
      ++d;
    } else if (kind == 7 && !has_mask) {  // mask over one or two dims
      const int k = (d + 1 < nd && pick(2)) ? 2 : 1;
      Shape s(c.shape.begin() + d, c.shape.begin() + d + k);
      items.push_back(random_values(s, uint32_t(gen()), kBool));
      has_mask = true;
      d += k;
    } else if (kind == 8) {
      items.push_back(NewAxis{});
    } else {  // a full dim, written as an empty slice
      items.push_back(Slice{});
      ++d;
    }
  }
  // With a mask, the other integer tensors must broadcast with its count:
  // make them 0-d.
  if (has_mask)
    for (auto& e : items)
      if (auto* t = std::get_if<Tensor>(&e); t && t->dtype() != kBool) *t = reshape(slice(reshape(*t, {-1}), 0, 0, 1), {});
  // Replace a run of full slices by an Ellipsis, or drop trailing ones.
  std::vector<size_t> full;
  for (size_t k = 0; k < items.size(); ++k)
    if (auto* s = std::get_if<Slice>(&items[k]); s && !s->start && !s->stop && s->step == 1) full.push_back(k);
  const bool ellipsis = !full.empty() && pick(2);
  if (ellipsis) items[full[size_t(pick(int(full.size())))]] = Ellipsis{};
  while (!ellipsis && !items.empty() && pick(2)) {
    auto* s = std::get_if<Slice>(&items.back());
    if (!s || s->start || s->stop || s->step != 1) break;
    items.pop_back();
  }
  c.indices = items;
  return c;
}

TEST(Index, RandomAgainstReference) {
  std::mt19937 gen(2024);
  int checked = 0;
  for (int trial = 0; trial < 600; ++trial) {
    RandomCase c = random_case(gen);
    SCOPED_TRACE("trial " + std::to_string(trial) + " shape " + shape_str(c.shape));
    Tensor x = random_tensor(c.shape, uint32_t(trial));
    Tensor input = trial % 3 == 0 ? non_contiguous(x) : x;
    Host expected = reference_get(Host(x), c.indices);
    Tensor got = index(input, c.indices);
    expect_host(got, expected);
    checked++;
  }
  EXPECT_EQ(checked, 600);
}

TEST(IndexPut, RandomAgainstReference) {
  std::mt19937 gen(77);
  for (int trial = 0; trial < 600; ++trial) {
    RandomCase c = random_case(gen);
    SCOPED_TRACE("trial " + std::to_string(trial) + " shape " + shape_str(c.shape));
    Tensor x = random_tensor(c.shape, uint32_t(trial));
    Shape result = reference_index(c.shape, c.indices).result_shape;
    // A value of the result's shape, or one broadcast to it.
    Shape vshape = result;
    if (trial % 3 == 1 && !vshape.empty()) vshape.erase(vshape.begin());
    if (trial % 3 == 2)
      for (auto& s : vshape) s = gen() % 2 ? 1 : s;
    Tensor value = random_tensor(vshape, uint32_t(1000 + trial));
    const bool accumulate = trial % 2 == 1;
    Host expected = reference_put(Host(x), c.indices, Host(value), accumulate);
    Tensor target = trial % 4 == 0 ? non_contiguous(x) : clone(x);
    index_put_(target, c.indices, value, accumulate);
    expect_host(target, expected);
  }
}

// --- index_put_ ----------------------------------------------------------------------------

TEST(IndexPut, HandValues) {
  Tensor x = zeros({3, 4});
  index_put_(x, I({int64_t(1)}), from_vector({1, 2, 3, 4}, {4}));
  index_put_(x, I({Slice{}, int64_t(0)}), 9.0);
  expect_values(x, {9, 0, 0, 0, 9, 2, 3, 4, 9, 0, 0, 0});
  index_put_(x, I({longs({0, 2}, {2}), longs({3, 3}, {2})}), from_vector({5, 6}, {2}));
  expect_values(x, {9, 0, 0, 5, 9, 2, 3, 4, 9, 0, 0, 6});
  // A mask assigns a scalar to every selected element.
  index_put_(x, I({mask_of({0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {3, 4})}), -1.0);
  expect_values(x, {9, -1, 0, 5, 9, -1, 3, 4, 9, 0, 0, 6});
  // Accumulate adds repeated indices.
  Tensor y = zeros({3});
  index_put_(y, I({longs({0, 0, 2, 0}, {4})}), from_vector({1, 2, 3, 4}, {4}), true);
  expect_values(y, {7, 0, 3});
  // The value broadcasts, and leading size-1 dims beyond the result are dropped.
  Tensor z = zeros({2, 3});
  index_put_(z, I({longs({1}, {1})}), from_vector({1, 2, 3}, {3}));
  index_put_(z, I({int64_t(0)}), from_vector({4, 5, 6}, {1, 3}));
  expect_values(z, {4, 5, 6, 1, 2, 3});
  // Values are cast to the tensor's dtype.
  Tensor i = zeros({3}, {.dtype = kInt32});
  index_put_(i, I({longs({1}, {1})}), from_vector({2.7}, {1}));
  expect_values(i, {0, 2, 0});
}

TEST(IndexPut, EveryDtype) {
  for (DType dt : all_dtypes()) {
    Tensor x = random_values({3, 4}, 5, dt);
    Tensor v = random_values({2, 4}, 6, dt);
    auto idx = I({longs({2, 0}, {2})});
    Host expected = reference_put(Host(x), idx, Host(v), false);
    index_put_(x, idx, v);
    EXPECT_EQ(x.dtype(), dt);
    expect_host(x, expected);
    Tensor acc = random_values({3, 4}, 7, dt);
    auto idx2 = I({Slice{}, longs({1, 1}, {2})});
    Tensor v2 = random_values({3, 2}, 8, dt);
    Host expected2 = reference_put(Host(acc), idx2, Host(v2), true);
    index_put_(acc, idx2, v2, true);
    if (dt != kBool) expect_host(acc, expected2, 0.5);
  }
}

TEST(IndexPut, WritesThroughViewsAndReadsAliasedValuesFirst) {
  Tensor base = zeros({4, 4});
  Tensor rows = slice(base, 0, 1, 3);
  index_put_(rows, I({Slice{}, longs({0, 3}, {2})}), 5.0);
  expect_values(base, {0, 0, 0, 0, 5, 0, 0, 5, 5, 0, 0, 5, 0, 0, 0, 0});
  // x[1:] = x[:-1] shifts by one, reading the old values.
  Tensor x = from_vector({1, 2, 3, 4}, {4});
  index_put_(x, I({Slice{1, {}, 1}}), slice(x, 0, 0, 3));
  expect_values(x, {1, 1, 2, 3});
  Tensor e = expand(zeros({1}), {3});
  EXPECT_THROW(index_put_(e, I({int64_t(0)}), 1.0), Error);
}

TEST(IndexPut, BadIndicesLeaveTheTensorUnchanged) {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  std::vector<double> before = values(x);
  // One bad index among good ones: nothing may be written.
  EXPECT_THROW(index_put_(x, I({longs({0, 1, 2}, {3})}), 0.0), IndexError);
  EXPECT_THROW(index_put_(x, I({Slice{}, longs({0, -4}, {2})}), 0.0), IndexError);
  EXPECT_THROW(index_put_(x, I({longs({1, 0}, {2}), longs({2, 3}, {2})}), from_vector({7, 8}, {2}), true), IndexError);
  EXPECT_THROW(index_put_(x, I({int64_t(2)}), 0.0), IndexError);
  EXPECT_THROW(index_put_(x, I({mask_of({1, 0, 1}, {3})}), 0.0), IndexError);
  EXPECT_THROW(index_put_(x, I({int64_t(0)}), from_vector({1, 2}, {2})), ShapeError);
  EXPECT_THROW(index_put_(x, I({longs({0, 1}, {2})}), zeros({3, 3})), ShapeError);
  EXPECT_THROW(index_put_(x, I({zeros({1})}), 0.0), IndexError);
  EXPECT_THROW(index_put_(x, I({Ellipsis{}, Ellipsis{}}), 0.0), IndexError);
  expect_values(x, before);
}

// --- autograd ------------------------------------------------------------------------------

TEST(Index, Gradients) {
  Tensor x = random_tensor({3, 4, 2}, 11).requires_grad_();
  std::vector<std::vector<TensorIndex>> cases{
      I({int64_t(1), Slice{1, {}, 2}}),
      I({longs({2, 0, 2}, {3})}),  // repeated rows accumulate
      I({Slice{}, longs({3, 0}, {2}), longs({1, 1}, {2})}),
      I({longs({0, 2}, {2}), Slice{}, longs({0, 1}, {2})}),
      I({mask_of({1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1}, {3, 4})}),
      I({Ellipsis{}, NewAxis{}, int64_t(-1)}),
      I({random_values({3, 4, 2}, 16, kBool)}),  // a mask of x's shape: the masked_select path
  };
  for (const auto& idx : cases) {
    expect_gradcheck([&](const TensorList& in) { return index(in[0], idx); }, {x});
    expect_double_backward([&](const Tensor& t) { return index(t, idx); }, x);
  }
}

TEST(IndexPut, Gradients) {
  Tensor x = random_tensor({3, 4}, 12).requires_grad_();
  Tensor v = random_tensor({2, 4}, 13).requires_grad_();
  Tensor row = random_tensor({4}, 14).requires_grad_();
  Tensor idx = longs({2, 0}, {2});
  for (bool accumulate : {false, true}) {
    expect_gradcheck(
        [&](const TensorList& in) {
          Tensor y = mul(in[0], 1.0);
          index_put_(y, I({idx}), in[1], accumulate);
          return y;
        },
        {x, v});
    // A broadcast value: its gradient sums over the rows it filled (rows
    // repeat only when accumulating; otherwise one write wins).
    expect_gradcheck(
        [&](const TensorList& in) {
          Tensor y = mul(in[0], 2.0);
          index_put_(y, I({accumulate ? longs({0, 0, 1}, {3}) : longs({0, 2, 1}, {3})}), in[1], accumulate);
          return y;
        },
        {x, row});
  }
  expect_gradcheck(
      [&](const TensorList& in) {
        Tensor y = mul(in[0], 1.0);
        index_put_(y, I({Slice{1, {}, 1}, Slice{{}, {}, 2}}), in[1]);
        return y;
      },
      {x, random_tensor({2, 2}, 15).requires_grad_()});
  expect_double_backward(
      [&](const Tensor& t) {
        Tensor y = mul(x.detach(), 1.0);
        index_put_(y, I({idx}), mul(t, t));
        return y;
      },
      v);
  // The overwritten positions get no gradient; the rest pass through.
  Tensor y = mul(x, 1.0);
  index_put_(y, I({mask_of({1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, {3, 4})}), 0.0);
  x.set_grad(Tensor());
  sum(y).backward();
  expect_values(x.grad(), {0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0});
}

TEST(IndexPut, LeafRequiringGrad) {
  Tensor leaf = zeros({3}, {.dtype = kFloat64}).requires_grad_();
  EXPECT_THROW(index_put_(leaf, I({int64_t(0)}), 1.0), Error);
  {
    NoGradGuard no_grad;
    index_put_(leaf, I({int64_t(0)}), 1.0);
  }
  expect_values(leaf, {1, 0, 0});
  // Writing a value that requires grad into a plain tensor makes it require grad.
  Tensor plain = zeros({3}, {.dtype = kFloat64});
  Tensor w = full({}, 2.0, {.dtype = kFloat64}).requires_grad_();
  index_put_(plain, I({longs({0, 2}, {2})}), w);
  EXPECT_TRUE(plain.requires_grad());
  sum(plain).backward();
  expect_values(w.grad(), {2});
}

}  // namespace
}  // namespace mf
