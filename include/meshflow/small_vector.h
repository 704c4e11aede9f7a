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
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace mf {

// Note [Inline shapes]
// Every op call makes shapes and strides: the broadcast shape its infer
// returns, the output's sizes and contiguous strides, the loops' coalesced
// per-operand strides. As std::vector each of those was a heap allocation
// and a free, about two thirds of the time of a small op called from
// Python. Tensors rarely have more than six dims, so a Shape keeps six
// inline and only longer ones reach the heap. The interface is std::vector's
// (what the code uses of it), and a Shape converts to and from
// std::vector<int64_t> implicitly where an API still takes one.
//
// Restricted to trivially copyable element types: elements are moved with
// memcpy and never destroyed. The inline array starts zeroed, so copying
// all of it reads no indeterminate values.
template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "SmallVector holds trivially copyable types only");
  static_assert(N > 0, "SmallVector needs inline room");

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

  SmallVector() noexcept = default;
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(size_t n, const T& value) { assign(n, value); }
  SmallVector(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  template <typename It,
            typename = std::enable_if_t<std::is_base_of_v<
                std::input_iterator_tag, typename std::iterator_traits<It>::iterator_category>>>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit by design
  SmallVector(const SmallVector& o) { copy_from(o); }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  ~SmallVector() { release(); }

  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) copy_from(o);
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      data_ = inline_;
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

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }

  void assign(size_t n, const T& value) {
    const T v = value;  // value may live inside *this
    size_ = 0;
    reserve(n);
    std::fill_n(data_, n, v);
    size_ = n;
  }
  template <typename It,
            typename = std::enable_if_t<std::is_base_of_v<
                std::input_iterator_tag, typename std::iterator_traits<It>::iterator_category>>>
  void assign(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag,
                                    typename std::iterator_traits<It>::iterator_category>) {
      const size_t n = size_t(std::distance(first, last));
      if (n > capacity_) {
        SmallVector tmp;  // first..last may point into *this
        tmp.reserve(n);
        std::copy(first, last, tmp.data_);
        tmp.size_ = n;
        *this = std::move(tmp);
        return;
      }
      std::copy(first, last, data_);
      size_ = n;
    } else {
      size_ = 0;
      for (; first != last; ++first) push_back(*first);
    }
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
  void clear() noexcept { size_ = 0; }
  void resize(size_t n) { resize(n, T()); }
  void resize(size_t n, const T& value) {
    if (n > size_) {
      const T v = value;
      reserve(n);
      std::fill(data_ + size_, data_ + n, v);
    }
    size_ = n;
  }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T v = value;  // value may live inside *this
      grow_to(next_capacity(size_ + 1));
      data_[size_++] = v;
      return;
    }
    data_[size_++] = value;
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t(1), value); }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const T v = value;
    const size_t at = size_t(pos - data_);
    open_gap(at, n);
    std::fill_n(data_ + at, n, v);
    return data_ + at;
  }
  template <typename It,
            typename = std::enable_if_t<std::is_base_of_v<
                std::input_iterator_tag, typename std::iterator_traits<It>::iterator_category>>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = size_t(pos - data_);
    SmallVector tmp(first, last);  // first..last may point into *this
    open_gap(at, tmp.size_);
    if (tmp.size_) std::memcpy(data_ + at, tmp.data_, tmp.size_ * sizeof(T));
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  template <typename... Args>
  iterator emplace(const_iterator pos, Args&&... args) {
    return insert(pos, T(std::forward<Args>(args)...));
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = size_t(first - data_), n = size_t(last - first);
    if (n) std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return data_ + at;
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
  bool on_heap() const noexcept { return data_ != inline_; }
  // Between two inline vectors the whole inline array is copied: a copy of
  // constant size compiles to a few moves, where a copy of size_ elements
  // would be a call to memmove.
  void copy_from(const SmallVector& o) {
    if (!on_heap() && !o.on_heap()) {
      std::memcpy(inline_, o.inline_, sizeof(inline_));
      size_ = o.size_;
      return;
    }
    assign(o.begin(), o.end());
  }
  void release() noexcept {
    if (on_heap()) std::free(data_);
  }
  // Steals o's heap buffer, or copies its inline elements; o is left empty.
  void take(SmallVector& o) noexcept {
    if (o.on_heap()) {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_;
      o.capacity_ = N;
    } else {
      std::memcpy(inline_, o.inline_, sizeof(inline_));
    }
    size_ = o.size_;
    o.size_ = 0;
  }
  static size_t next_capacity(size_t want) { return std::max(want, 2 * size_t(N)); }
  void grow_to(size_t n) {
    if (n > max_size()) throw std::length_error("SmallVector: too many elements");
    n = std::max(n, 2 * capacity_);
    T* p = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if (size_) std::memcpy(p, data_, size_ * sizeof(T));
    release();
    data_ = p;
    capacity_ = n;
  }
  void open_gap(size_t at, size_t n) {
    if (size_ + n > capacity_) grow_to(size_ + n);
    if (n && at < size_) std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(T));
    size_ += n;
  }

  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
  T inline_[N] = {};  // all of it is copied (copy_from)
};

}  // namespace mf
