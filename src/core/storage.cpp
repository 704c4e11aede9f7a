#include "meshflow/storage.h"

namespace mf {

StorageImpl::StorageImpl(size_t nbytes, Device device, Allocator* allocator)
    : nbytes_(nbytes), device_(device), allocator_(allocator) {
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, void (*deleter)(void*), void* ctx)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), deleter_ctx_(ctx) {}

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {}

StorageImpl::~StorageImpl() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(deleter_ctx_);
}

}  // namespace mf
