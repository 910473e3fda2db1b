// torchport's CPU runner for CUDA C++ kernels: what a translated .cu file needs to compile
// with the host C++ compiler and run on the CPU (see sandbox/cudacpu/__init__.py).
//
// Each thread of a block runs the kernel's body on the CPU: one after another in a plain
// loop for kernels without a barrier, or as fibers (one stack each) that switch at
// __syncthreads() for kernels with one, so a barrier means what it means on a GPU: every
// thread of the block reaches it before any goes on. Blocks run in parallel on torch's
// intra-op threads, unless the kernel uses atomics (then one after another, so the
// reference numbers do not depend on the order threads happened to add in). Atomics are
// real atomics either way. __shared__ variables are per-OS-thread statics: the fibers of
// one block run on one OS thread, so they share them, as a block's threads share shared
// memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <math.h>  // libstdc++'s: float overloads of sqrt, exp, ... in the global namespace, as CUDA has
#include <tuple>
#include <type_traits>
#include <utility>

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

// --- qualifiers -----------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __managed__
#define __constant__
#define __align__(n) alignas(n)
#define __shared__ static thread_local
#define CUDACPU 1
#define CUDACPU_ARCH 800  // user code's __CUDA_ARCH__: the device pass of an sm_80 build
#define CUDACPU_CUDACC 1  // user code's __CUDACC__

// --- built-in variables ---------------------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

// --- vector types ---------------------------------------------------------------------
#define CUDACPU_VEC2(T, N, A)                                           \
  struct alignas(A) N##2 { T x, y; };                                   \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUDACPU_VEC3(T, N)                                              \
  struct N##3 { T x, y, z; };                                           \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUDACPU_VEC4(T, N, A)                                           \
  struct alignas(A) N##4 { T x, y, z, w; };                             \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
CUDACPU_VEC2(float, float, 8)
CUDACPU_VEC3(float, float)
CUDACPU_VEC4(float, float, 16)
CUDACPU_VEC2(double, double, 16)
CUDACPU_VEC4(double, double, 32)
CUDACPU_VEC2(int, int, 8)
CUDACPU_VEC3(int, int)
CUDACPU_VEC4(int, int, 16)
CUDACPU_VEC2(unsigned int, uint, 8)
CUDACPU_VEC4(unsigned int, uint, 16)
CUDACPU_VEC2(long long, longlong, 16)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
inline dim3 make_dim3(unsigned int x, unsigned int y, unsigned int z) { return dim3(x, y, z); }

// --- torch's accessors as device code declares them ---------------------------------------
// RestrictPtrTraits (packed accessors with __restrict__ data) is declared for nvcc only.
#if __has_include(<torch/headeronly/core/TensorAccessor.h>)
#include <torch/headeronly/core/TensorAccessor.h>
namespace torch::headeronly {
template <typename T>
struct RestrictPtrTraits {
  typedef T* __restrict__ PtrType;
};
}  // namespace torch::headeronly
namespace at {
using torch::headeronly::RestrictPtrTraits;
}  // namespace at
#else
#include <ATen/core/TensorAccessor.h>
namespace at {
template <typename T>
struct RestrictPtrTraits {
  typedef T* __restrict__ PtrType;
};
}  // namespace at
#endif

// --- a dtype as torch 1.x extensions pass it to AT_DISPATCH ------------------------------
// AT_DISPATCH_FLOATING_TYPES(x.type(), ...): torch 1.x took the tensor's
// DeprecatedTypeProperties there (with a deprecation warning) and dispatched on its scalar
// type; torch 2's dispatch macros take a ScalarType only (``::detail::scalar_type``). The
// overload torch removed, as a template, so a torch that still has it prefers its own.
#if __has_include(<ATen/core/DeprecatedTypeProperties.h>)
#include <ATen/core/DeprecatedTypeProperties.h>
namespace detail {
template <typename T,
          typename = std::enable_if_t<std::is_same_v<T, at::DeprecatedTypeProperties>>>
inline c10::ScalarType scalar_type(const T& t) {
  return t.scalarType();
}
}  // namespace detail
#endif

// --- half and bfloat16 ----------------------------------------------------------------
using __half = c10::Half;
using half = c10::Half;
using __nv_bfloat16 = c10::BFloat16;
using nv_bfloat16 = c10::BFloat16;
inline __half __float2half(float v) { return __half(v); }
inline __half __float2half_rn(float v) { return __half(v); }
inline float __half2float(__half v) { return static_cast<float>(v); }
inline __nv_bfloat16 __float2bfloat16(float v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) { return __nv_bfloat16(v); }
inline float __bfloat162float(__nv_bfloat16 v) { return static_cast<float>(v); }
inline __half __hadd(__half a, __half b) { return __half(float(a) + float(b)); }
inline __half __hmul(__half a, __half b) { return __half(float(a) * float(b)); }
inline __half __hsub(__half a, __half b) { return __half(float(a) - float(b)); }

// --- math intrinsics (exact CPU versions of the GPU's fast ones) -----------------------
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline void sincosf_(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline long long __float2ll_rn(float x) { return static_cast<long long>(nearbyintf(x)); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned int __float_as_uint(float x) { unsigned int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned int __umul24(unsigned int a, unsigned int b) { return a * b; }
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}

// CUDA's min/max are overloaded for every arithmetic pair in device code; the usual
// arithmetic conversions give the same result type here.
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a < b ? b : a; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a < b ? b : a; }

// Read-only cache loads are plain loads on the CPU.
template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcg(const T* p) { return *p; }
template <class T>
inline T __ldca(const T* p) { return *p; }
template <class T>
inline T __ldcs(const T* p) { return *p; }
template <class T>
inline void __stcg(T* p, T v) { *p = v; }
template <class T>
inline void __stcs(T* p, T v) { *p = v; }

// --- atomics: real ones, on every type CUDA has them for --------------------------------
namespace cudacpu {
template <class T, class F>
inline T atomic_update(T* address, F update) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic on this size");
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits seen = __atomic_load_n(bits, __ATOMIC_RELAXED);
  while (true) {
    T old;
    std::memcpy(&old, &seen, sizeof(T));
    T next = update(old);
    Bits want;
    std::memcpy(&want, &next, sizeof(T));
    if (__atomic_compare_exchange_n(bits, &seen, want, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
      return old;
    }
  }
}
}  // namespace cudacpu

template <class T, class V>
inline T atomicAdd(T* a, V v) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(a, static_cast<T>(v), __ATOMIC_SEQ_CST);
  } else {
    return ::cudacpu::atomic_update(a, [&](T old) { return static_cast<T>(old + v); });
  }
}
template <class T, class V>
inline T atomicSub(T* a, V v) {
  return __atomic_fetch_sub(a, static_cast<T>(v), __ATOMIC_SEQ_CST);
}
template <class T, class V>
inline T atomicMax(T* a, V v) {
  return ::cudacpu::atomic_update(a, [&](T old) { return old < T(v) ? T(v) : old; });
}
template <class T, class V>
inline T atomicMin(T* a, V v) {
  return ::cudacpu::atomic_update(a, [&](T old) { return T(v) < old ? T(v) : old; });
}
template <class T, class V>
inline T atomicExch(T* a, V v) {
  return ::cudacpu::atomic_update(a, [&](T) { return static_cast<T>(v); });
}
template <class T, class C, class V>
inline T atomicCAS(T* a, C compare, V v) {
  T expected = static_cast<T>(compare);
  __atomic_compare_exchange_n(a, &expected, static_cast<T>(v), false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  return expected;  // the old value, whether or not it was swapped
}
template <class T, class V>
inline T atomicAnd(T* a, V v) { return __atomic_fetch_and(a, static_cast<T>(v), __ATOMIC_SEQ_CST); }
template <class T, class V>
inline T atomicOr(T* a, V v) { return __atomic_fetch_or(a, static_cast<T>(v), __ATOMIC_SEQ_CST); }
template <class T, class V>
inline T atomicXor(T* a, V v) { return __atomic_fetch_xor(a, static_cast<T>(v), __ATOMIC_SEQ_CST); }
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
  return ::cudacpu::atomic_update(a, [&](unsigned int old) { return old >= limit ? 0u : old + 1; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
  return ::cudacpu::atomic_update(
      a, [&](unsigned int old) { return (old == 0 || old > limit) ? limit : old - 1; });
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicExch_block atomicExch
#define atomicCAS_block atomicCAS
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return static_cast<long long>(__builtin_ia32_rdtsc()); }

// --- the runner -------------------------------------------------------------------------
namespace cudacpu {

// What the translator knows of a kernel: its name (for the run's report), whether it (or
// a device function it calls) waits at __syncthreads(), and whether it uses atomics.
struct KernelInfo {
  const char* name;
  bool barrier;
  bool atomics;
};

using ThreadBody = void (*)(void* context);
// Run one launch: every block of `grid`, every thread of `block`, `body(context)` per thread.
void run_grid(const KernelInfo& info, dim3 grid, dim3 block, size_t shared_bytes,
              ThreadBody body, void* context);
void* dynamic_shared();
void syncthreads();
int syncthreads_count(int predicate);
[[noreturn]] void refuse(const char* message);

template <class Kernel, class... Args>
struct Launch {
  Kernel kernel;
  std::tuple<Args...> args;
  static void thread(void* self) {
    auto* launch = static_cast<Launch*>(self);
    std::apply(launch->kernel, launch->args);
  }
};

// `kernel<<<grid, block, shared, stream>>>(args...)` becomes
// `launch(info, grid, block, shared, stream, [&](auto... a) { kernel(a...); }, args...)`:
// the arguments are evaluated once, as on the host, and each thread gets a copy.
template <class Stream, class Kernel, class... Args>
inline void launch(const KernelInfo& info, dim3 grid, dim3 block, size_t shared_bytes,
                   const Stream& /*stream: one queue on the CPU*/, Kernel kernel, Args&&... args) {
  Launch<Kernel, std::decay_t<Args>...> launch{kernel, std::make_tuple(std::forward<Args>(args)...)};
  run_grid(info, grid, block, shared_bytes, &decltype(launch)::thread, &launch);
}
}  // namespace cudacpu

inline void __syncthreads() { ::cudacpu::syncthreads(); }
inline int __syncthreads_count(int p) { return ::cudacpu::syncthreads_count(p != 0); }
inline int __syncthreads_and(int p) {
  return ::cudacpu::syncthreads_count(p != 0) ==
         static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int p) { return ::cudacpu::syncthreads_count(p != 0) > 0; }

#include <cudacpu/host.h>
