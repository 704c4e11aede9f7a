// SmallVector: a vector that keeps its first N elements inline.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace mf {

// Note [Inline shapes]
// Every op call makes shapes and strides (the broadcast shape its infer
// returns, the output's sizes and contiguous strides, the loops' coalesced
// per-operand strides) and lists of tensors (its inputs, its outputs). As
// std::vector each of those was a heap allocation and a free, most of the
// time of a small op called from Python. Tensors rarely have more than six
// dims and ops rarely more than four inputs, so a Shape keeps six dims
// inline and a TensorList four tensors; only longer ones reach the heap.
// The interface is std::vector's (what the code uses of it), and a
// SmallVector converts to and from std::vector implicitly where an API
// still takes one.
//
// Unlike std::vector, moving a SmallVector whose elements are inline moves
// the elements: a pointer or reference into the source does not follow
// them. Code keeps indices, not pointers, into lists it moves.
//
// Trivially copyable elements are copied with memcpy, and an inline array
// of them starts zeroed so that copying all of it (a constant-size copy
// between two inline vectors) reads no indeterminate values. Other elements
// are constructed and destroyed one by one.
template <typename T, size_t N>
class SmallVector {
  static_assert(N > 0, "SmallVector needs inline room");
  static constexpr bool kTrivial = std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>;

  template <typename It>
  using if_iterator = std::enable_if_t<
      std::is_base_of_v<std::input_iterator_tag, typename std::iterator_traits<It>::iterator_category>>;

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept : data_(inline_ptr()) {}
  explicit SmallVector(size_t n) : SmallVector() { resize(n); }
  SmallVector(size_t n, const T& value) : SmallVector() { assign(n, value); }
  SmallVector(std::initializer_list<T> il) : SmallVector() { append(il.begin(), il.end()); }
  template <typename It, typename = if_iterator<It>>
  SmallVector(It first, It last) : SmallVector() {
    append(first, last);
  }
  SmallVector(const std::vector<T>& v) : SmallVector() { append(v.begin(), v.end()); }  // NOLINT: implicit
  SmallVector(std::vector<T>&& v) : SmallVector() {                                      // NOLINT: implicit
    append(std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  }
  SmallVector(const SmallVector& o) : SmallVector() {
    if constexpr (kTrivial) {
      if (!o.on_heap()) {
        std::memcpy(store_.elems, o.store_.elems, sizeof(store_.elems));
        size_ = o.size_;
        return;
      }
    }
    append(o.begin(), o.end());
  }
  SmallVector(SmallVector&& o) noexcept : SmallVector() { take(o); }
  ~SmallVector() { release(); }

  SmallVector& operator=(const SmallVector& o) {
    if (this == &o) return *this;
    if constexpr (kTrivial) {
      if (!on_heap() && !o.on_heap()) {
        std::memcpy(store_.elems, o.store_.elems, sizeof(store_.elems));
        size_ = o.size_;
        return *this;
      }
    }
    assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      data_ = inline_ptr();
      size_ = 0;
      capacity_ = N;
      take(o);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  SmallVector& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }

  operator std::vector<T>() const& { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design
  operator std::vector<T>() && {                                               // NOLINT: implicit by design
    return std::vector<T>(std::make_move_iterator(begin()), std::make_move_iterator(end()));
  }

  void assign(size_t n, const T& value) {
    if constexpr (kTrivial) {
      const T v = value;  // value may live inside *this
      size_ = 0;
      reserve(n);
      std::fill_n(data_, n, v);
      size_ = n;
      return;
    }
    SmallVector tmp;  // value may live inside *this
    tmp.reserve(n);
    std::uninitialized_fill_n(tmp.data_, n, value);
    tmp.size_ = n;
    *this = std::move(tmp);
  }
  template <typename It, typename = if_iterator<It>>
  void assign(It first, It last) {
    if constexpr (kTrivial && std::is_base_of_v<std::forward_iterator_tag,
                                                typename std::iterator_traits<It>::iterator_category>) {
      const size_t n = size_t(std::distance(first, last));
      if (n <= capacity_) {  // memmove semantics: first..last may overlap *this
        std::copy(first, last, data_);
        size_ = n;
        return;
      }
    }
    SmallVector tmp(first, last);  // first..last may point into *this
    *this = std::move(tmp);
  }
  void assign(std::initializer_list<T> il) { assign(il.begin(), il.end()); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  static constexpr size_t max_size() noexcept { return size_t(PTRDIFF_MAX) / sizeof(T); }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  T& operator[](size_t i) noexcept { return data_[i]; }
  const T& operator[](size_t i) const noexcept { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void shrink_to_fit() noexcept {}
  void clear() noexcept {
    std::destroy(data_, data_ + size_);
    size_ = 0;
  }
  void resize(size_t n) {
    if (n > size_) {
      reserve(n);
      std::uninitialized_value_construct(data_ + size_, data_ + n);
    } else {
      std::destroy(data_ + n, data_ + size_);
    }
    size_ = n;
  }
  void resize(size_t n, const T& value) {
    if (n > size_) {
      if (n > capacity_) {
        const T v = value;  // value may live inside *this
        grow_to(n);
        std::uninitialized_fill(data_ + size_, data_ + n, v);
      } else {
        std::uninitialized_fill(data_ + size_, data_ + n, value);
      }
    } else {
      std::destroy(data_ + n, data_ + size_);
    }
    size_ = n;
  }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      T v(std::forward<Args>(args)...);  // the arguments may refer into *this
      grow_to(std::max(size_ + 1, 2 * size_t(N)));
      ::new (static_cast<void*>(data_ + size_)) T(std::move(v));
    } else {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void pop_back() noexcept {
    --size_;
    std::destroy_at(data_ + size_);
  }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t(1), value); }
  iterator insert(const_iterator pos, T&& value) {
    const size_t at = size_t(pos - data_);
    T v(std::move(value));
    emplace_back(std::move(v));
    std::rotate(data_ + at, data_ + size_ - 1, data_ + size_);
    return data_ + at;
  }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const size_t at = size_t(pos - data_);
    SmallVector tmp(n, value);
    return insert_moved(at, tmp);
  }
  template <typename It, typename = if_iterator<It>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = size_t(pos - data_);
    SmallVector tmp(first, last);  // first..last may point into *this
    return insert_moved(at, tmp);
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  template <typename... Args>
  iterator emplace(const_iterator pos, Args&&... args) {
    return insert(pos, T(std::forward<Args>(args)...));
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    T* f = data_ + (first - data_);
    T* l = data_ + (last - data_);
    if (f != l) {
      T* new_end = std::move(l, end(), f);
      std::destroy(new_end, end());
      size_ -= size_t(l - f);
    }
    return f;
  }
  void swap(SmallVector& o) noexcept {
    SmallVector tmp(std::move(o));
    o = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend auto operator<=>(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }
  friend void swap(SmallVector& a, SmallVector& b) noexcept { a.swap(b); }

 private:
  // Inline room: an array of T for trivial elements (zeroed), raw bytes
  // for the others (constructed as elements are added).
  struct TrivialStore {
    T elems[N] = {};
    T* ptr() noexcept { return elems; }
  };
  struct RawStore {
    alignas(T) unsigned char bytes[N * sizeof(T)];
    T* ptr() noexcept { return reinterpret_cast<T*>(bytes); }
  };

  T* inline_ptr() noexcept { return store_.ptr(); }
  bool on_heap() const noexcept { return data_ != const_cast<SmallVector*>(this)->inline_ptr(); }
  void release() noexcept {
    std::destroy(data_, data_ + size_);
    if (on_heap()) std::free(data_);
  }
  // Steals o's heap buffer, or moves its inline elements; o is left empty.
  void take(SmallVector& o) noexcept {
    if (o.on_heap()) {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_ptr();
      o.capacity_ = N;
    } else if constexpr (kTrivial) {
      std::memcpy(store_.elems, o.store_.elems, sizeof(store_.elems));
    } else {
      std::uninitialized_move(o.data_, o.data_ + o.size_, data_);
      std::destroy(o.data_, o.data_ + o.size_);
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  template <typename It>
  void append(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      reserve(size_ + size_t(std::distance(first, last)));
      for (; first != last; ++first) ::new (static_cast<void*>(data_ + size_++)) T(*first);
    } else {
      for (; first != last; ++first) emplace_back(*first);
    }
  }
  void grow_to(size_t n) {
    if (n > max_size()) throw std::length_error("SmallVector: too many elements");
    n = std::max(n, 2 * capacity_);
    T* p = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if constexpr (kTrivial) {
      if (size_) std::memcpy(p, data_, size_ * sizeof(T));
    } else {
      std::uninitialized_move(data_, data_ + size_, p);
      std::destroy(data_, data_ + size_);
    }
    if (on_heap()) std::free(data_);
    data_ = p;
    capacity_ = n;
  }
  // Moves tmp's elements in at index `at`.
  iterator insert_moved(size_t at, SmallVector& tmp) {
    const size_t n = tmp.size_;
    SmallVector out;
    out.reserve(size_ + n);
    std::uninitialized_move(data_, data_ + at, out.data_);
    std::uninitialized_move(tmp.data_, tmp.data_ + n, out.data_ + at);
    std::uninitialized_move(data_ + at, data_ + size_, out.data_ + at + n);
    out.size_ = size_ + n;
    *this = std::move(out);
    return data_ + at;
  }

  T* data_;
  size_t size_ = 0;
  size_t capacity_ = N;
  std::conditional_t<kTrivial, TrivialStore, RawStore> store_;
};

}  // namespace mf
