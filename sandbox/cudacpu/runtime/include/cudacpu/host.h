// The host side people write around kernels, for the CPU runner: the CUDA runtime calls
// (memory, errors, devices, streams) and torch's CUDA helpers (streams, guards, device
// properties, launch checks). One device, one queue: every launch has finished when it
// returns, so synchronising is a no-op and memory is host memory.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <cstdlib>
#include <cstring>
#include <optional>

// --- the CUDA runtime API ----------------------------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNotReady = 600,
};
using cudaError_t = cudaError;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
#define cudaStreamDefault 0
#define cudaStreamNonBlocking 1
#define cudaEventDefault 0
#define cudaEventDisableTiming 2

inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "error (torchport CPU runner)";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess" : "cudaErrorUnknown";
}
// Errors are thrown where they happen (a C++ exception the program sees), so none is left.
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaThreadSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = nullptr; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int = 0) {
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = nullptr; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = nullptr;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.0f;
  return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t = nullptr) {
  return cudaMemcpy(dst, src, n, kind);
}
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                size_t width, size_t height, cudaMemcpyKind) {
  for (size_t r = 0; r < height; ++r) {
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                 width);
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int value, size_t n) {
  if (n) std::memset(p, value, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t = nullptr) {
  return cudaMemset(p, value, n);
}
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t n) {
  *p = static_cast<T*>(std::malloc(n ? n : 1));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
inline cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMalloc(p, n); }
template <class T>
inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned int = 1) { return cudaMalloc(p, n); }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }
// A __constant__ or __device__ variable is an ordinary global here: copy into it by name.
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
  std::memcpy(reinterpret_cast<char*>(&symbol) + offset, src, n);
  return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n, size_t offset = 0,
                                           cudaMemcpyKind = cudaMemcpyHostToDevice,
                                           cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(symbol, src, n, offset);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                        cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, n);
  return cudaSuccess;
}

struct cudaDeviceProp {
  char name[256] = "torchport CPU runner";
  size_t totalGlobalMem = size_t(16) << 30;
  size_t sharedMemPerBlock = 48 << 10;
  size_t sharedMemPerBlockOptin = 96 << 10;
  size_t sharedMemPerMultiprocessor = 100 << 10;
  int regsPerBlock = 65536;
  int warpSize = 32;
  int maxThreadsPerBlock = 1024;
  int maxThreadsDim[3] = {1024, 1024, 64};
  int maxGridSize[3] = {2147483647, 65535, 65535};
  int multiProcessorCount = 8;
  int maxThreadsPerMultiProcessor = 2048;
  int major = 8;
  int minor = 0;
  int clockRate = 1000000;
  int l2CacheSize = 4 << 20;
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
namespace cudacpu {
inline cudaDeviceProp& device_properties() {
  static cudaDeviceProp prop;
  return prop;
}
}  // namespace cudacpu
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = ::cudacpu::device_properties();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  const cudaDeviceProp& p = ::cudacpu::device_properties();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
template <class F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int block, size_t) {
  *n = block > 0 ? 2048 / block : 1;
  return cudaSuccess;
}

// The driver API's result type, for code that checks it.
enum cudaError_enum { CUDA_SUCCESS = 0 };
using CUresult = cudaError_enum;

// --- torch's CUDA helpers (ATen/cuda, c10/cuda) -------------------------------------------
namespace c10 {
namespace cuda {
class CUDAStream {
 public:
  CUDAStream() = default;
  cudaStream_t stream() const { return nullptr; }
  operator cudaStream_t() const { return nullptr; }
  void synchronize() const {}
  bool query() const { return true; }
  c10::DeviceIndex device_index() const { return 0; }
  c10::Device device() const { return c10::Device(c10::kCPU); }
  int64_t id() const { return 0; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) { return CUDAStream(); }
inline void setCurrentCUDAStream(CUDAStream) {}
inline c10::DeviceIndex current_device() { return 0; }
inline c10::DeviceIndex device_count() { return 1; }
inline void device_synchronize() {}
inline void set_device(c10::DeviceIndex) {}

// Device guards choose the GPU a kernel runs on: there is one device here.
struct CUDAGuard {
  template <class D>
  explicit CUDAGuard(const D&) {}
  void set_device(const c10::Device&) {}
  void reset_device(const c10::Device&) {}
  c10::Device current_device() const { return c10::Device(c10::kCPU); }
  c10::Device original_device() const { return c10::Device(c10::kCPU); }
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard() = default;
  template <class D>
  explicit OptionalCUDAGuard(const D&) {}
  template <class D>
  void set_device(const D&) {}
  template <class D>
  void reset_device(const D&) {}
  void reset() {}
  std::optional<c10::Device> current_device() const { return std::nullopt; }
  std::optional<c10::Device> original_device() const { return std::nullopt; }
};
struct CUDAStreamGuard {
  template <class S>
  explicit CUDAStreamGuard(const S&) {}
};
struct OptionalCUDAStreamGuard {
  OptionalCUDAStreamGuard() = default;
  template <class S>
  explicit OptionalCUDAStreamGuard(const S&) {}
};
namespace CUDACachingAllocator {
inline void* raw_alloc(size_t n) { return std::malloc(n ? n : 1); }
inline void* raw_alloc_with_stream(size_t n, cudaStream_t) { return raw_alloc(n); }
inline void raw_delete(void* p) { std::free(p); }
}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10

namespace at {
namespace cuda {
using c10::cuda::CUDAGuard;
using c10::cuda::CUDAStream;
using c10::cuda::CUDAStreamGuard;
using c10::cuda::OptionalCUDAGuard;
using c10::cuda::OptionalCUDAStreamGuard;
using c10::cuda::current_device;
using c10::cuda::device_count;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool;
using c10::cuda::setCurrentCUDAStream;
namespace CUDACachingAllocator = c10::cuda::CUDACachingAllocator;
inline cudaDeviceProp* getCurrentDeviceProperties() { return &::cudacpu::device_properties(); }
inline cudaDeviceProp* getDeviceProperties(int64_t) { return &::cudacpu::device_properties(); }
inline int warp_size() { return 32; }
}  // namespace cuda
}  // namespace at

// Launch checks: a failed launch has already thrown.
#define C10_CUDA_KERNEL_LAUNCH_CHECK() \
  do {                                 \
  } while (0)
#define C10_CUDA_CHECK(expr)                                                          \
  do {                                                                                \
    const cudaError_t cudacpu_status = (expr);                                        \
    TORCH_CHECK(cudacpu_status == cudaSuccess, "CUDA error: ",                        \
                cudaGetErrorString(cudacpu_status));                                  \
  } while (0)
#define C10_CUDA_CHECK_WARN(expr) (void)(expr)
#define AT_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define C10_CUDA_IGNORE_ERROR(expr) (void)(expr)
#define C10_CUDA_CLEAR_ERROR() (void)0

// ATen/cuda/Atomic.cuh
template <class T, class V>
inline T gpuAtomicAdd(T* a, V v) { return atomicAdd(a, v); }
template <class T, class V>
inline void fastAtomicAdd(T* tensor, int64_t index, int64_t, V value, bool) {
  atomicAdd(tensor + index, value);
}
