// Minimal C++ PrivateUse1 backend ("cppdev") for measuring dispatch overhead.
//
// Device memory is CPU memory (an allocator registered for PrivateUse1). A few
// kernels are written out (empty, empty_strided, copy_, _copy_from,
// _copy_from_and_resize, _local_scalar_dense, view, as_strided, _reshape_alias,
// resize_, set_); every other op goes through one boxed fallback that runs the
// CPU kernel, in one of two modes (set_mode):
//   0 "alias": device tensor arguments are replaced by CPU tensors that alias the
//     same memory (no copy); CPU results are adopted as device tensors (no copy);
//     results that are views of an argument are rebuilt on that argument's storage.
//   1 "copy": at::native::cpu_fallback, i.e. copy arguments to CPU, run, copy
//     results (and mutated arguments) back.
// Autograd needs nothing extra: the Autograd alias kernels cover AutogradPrivateUse1.

#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <unordered_map>

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;
const c10::Device kDevice(kDev, 0);
const c10::DispatchKeySet kDevKs(c10::DispatchKey::PrivateUse1);
const c10::DispatchKeySet kCpuKs(c10::DispatchKey::CPU);

std::atomic<int> g_mode{0};
std::atomic<int64_t> g_fallback_calls{0};
bool g_count_ops = false;
std::unordered_map<std::string, int64_t> g_op_counts;

// ---------------------------------------------------------------- allocator
void dev_delete(void* p) { c10::free_cpu(p); }

struct DevAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    return {p, p, &dev_delete, kDevice};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &dev_delete; }
  void copy_data(void* dst, const void* src, size_t n) const override {
    default_copy_data(dst, src, n);
  }
};
DevAllocator g_alloc;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_alloc)

// ---------------------------------------------------------------- device guard
struct DevGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device) const override { return kDevice; }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, kDevice);
  }
  c10::Stream getDefaultStream(c10::Device) const override {
    return c10::Stream(c10::Stream::DEFAULT, kDevice);
  }
  c10::Stream getNewStream(c10::Device, int = 0) const override {
    return c10::Stream(c10::Stream::DEFAULT, kDevice);
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, kDevice);
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, DevGuardImpl)

// ---------------------------------------------------------------- hooks
struct DevHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();  // draws from the CPU generator
  }
  at::Device getDeviceFromPtr(void*) const override { return kDevice; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t n) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), n);
  }
};
DevHooks g_hooks;

// ---------------------------------------------------------------- aliasing helpers
// A DataPtr that points into `owner`'s memory and keeps `owner` alive.
void release_storage(void* ctx) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(static_cast<c10::StorageImpl*>(ctx));
}

c10::Storage alias_storage(const c10::Storage& owner, c10::Device device,
                           c10::Allocator* allocator) {
  c10::StorageImpl* impl = owner.unsafeGetStorageImpl();
  void* data = impl->_mutable_data_ptr_no_checks().get();
  auto keep = c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl);
  c10::DataPtr ptr(data, keep.release(), &release_storage, device);
  return c10::Storage(c10::Storage::use_byte_size_t(), impl->nbytes(), std::move(ptr),
                      allocator, /*resizable=*/true);
}

at::Tensor make_tensor_on(c10::Storage storage, c10::DispatchKeySet ks, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), ks, like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                 like.storage_offset());
  return t;
}

// CPU tensor over the same memory as device tensor `t` (no copy).
at::Tensor cpu_alias(const at::Tensor& t) {
  return make_tensor_on(alias_storage(t.storage(), c10::Device(c10::kCPU), c10::GetCPUAllocator()),
                        kCpuKs, t);
}

at::Tensor as_cpu(const at::Tensor& t) {
  return (t.defined() && t.device().type() == kDev) ? cpu_alias(t) : t;
}

struct Frame {
  // alias storage impl -> original device storage
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> storages;
  // alias tensor -> original device tensor (the alias is kept alive: the kernel pops it)
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors;
  // fresh CPU storage impl -> adopted device storage (when shared by several results)
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> adopted;

  at::Tensor in(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kDev) return t;
    at::Tensor a = cpu_alias(t);
    storages.emplace_back(a.storage().unsafeGetStorageImpl(), t.storage());
    tensors.emplace_back(a, t);
    return a;
  }

  // After the CPU kernel ran: propagate metadata / reallocation of a mutated argument.
  void write_back() {
    for (auto& [alias, orig] : tensors) {
      c10::TensorImpl* aimpl = alias.unsafeGetTensorImpl();
      c10::TensorImpl* o = orig.unsafeGetTensorImpl();
      c10::StorageImpl* as = aimpl->storage().unsafeGetStorageImpl();
      c10::StorageImpl* os = o->storage().unsafeGetStorageImpl();
      if (as->_mutable_data_ptr_no_checks().get() != os->_mutable_data_ptr_no_checks().get() ||
          as->nbytes() != os->nbytes()) {
        // The kernel resized (reallocated) the alias: move its new buffer into the
        // device storage.
        TORCH_CHECK(as->_mutable_data_ptr_no_checks().get_deleter() != &release_storage,
                    "cppdev: argument storage was replaced by the CPU kernel");
        c10::DataPtr moved = std::move(as->_mutable_data_ptr_no_checks());
        moved.unsafe_set_device(kDevice);
        size_t n = as->nbytes();
        as->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
        as->set_nbytes(0);
        os->set_data_ptr_noswap(std::move(moved));
        os->set_nbytes(n);
      }
      if (o->sizes() != aimpl->sizes() || o->strides() != aimpl->strides() ||
          o->storage_offset() != aimpl->storage_offset()) {
        o->set_sizes_and_strides(aimpl->sizes(), aimpl->strides(), aimpl->storage_offset());
      }
    }
  }

  at::Tensor out(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    for (auto& [alias, orig] : tensors)
      if (alias.unsafeGetTensorImpl() == impl) return orig;  // in-place / out= result
    c10::StorageImpl* s = impl->storage().unsafeGetStorageImpl();
    for (auto& [aimpl_s, orig_s] : storages)
      if (aimpl_s == s) return make_tensor_on(orig_s, kDevKs, t);  // view of an argument
    for (auto& [cpu_s, dev_s] : adopted)
      if (cpu_s == s) return make_tensor_on(dev_s, kDevKs, t);
    // A fresh result: adopt its memory as device memory, without a copy.
    c10::Storage dev_s;
    if (c10::raw::intrusive_ptr::use_count(s) == 1 && c10::raw::intrusive_ptr::use_count(impl) <= 2 &&
        s->_mutable_data_ptr_no_checks().get_deleter() != &release_storage) {
      // Sole owner: retag the buffer itself (the CPU tensor is dropped right after).
      s->_mutable_data_ptr_no_checks().unsafe_set_device(kDevice);
      s->set_allocator(&g_alloc);
      dev_s = impl->storage();
    } else {
      dev_s = alias_storage(impl->storage(), kDevice, &g_alloc);
    }
    adopted.emplace_back(s, dev_s);
    return make_tensor_on(dev_s, kDevKs, t);
  }
};

c10::IValue map_ivalue(const c10::IValue& v, Frame& f, bool inbound) {
  if (v.isTensor()) return inbound ? f.in(v.toTensor()) : f.out(v.toTensor());
  if (v.isTensorList()) {
    auto l = v.toTensorList();
    c10::List<at::Tensor> r;
    r.reserve(l.size());
    for (const at::Tensor& t : l) r.push_back(inbound ? f.in(t) : f.out(t));
    return r;
  }
  if (v.isOptionalTensorList()) {
    auto l = v.toOptionalTensorList();
    c10::List<std::optional<at::Tensor>> r;
    r.reserve(l.size());
    for (std::optional<at::Tensor> t : l) {
      if (t.has_value()) r.push_back(inbound ? f.in(*t) : f.out(*t));
      else r.push_back(std::nullopt);
    }
    return r;
  }
  if (inbound && v.isDevice() && v.toDevice().type() == kDev) return c10::Device(c10::kCPU);
  return v;
}

void alias_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  Frame f;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor() || v.isTensorList() || v.isOptionalTensorList() || v.isDevice())
      v = map_ivalue(v, f, true);
  }
  op.redispatchBoxed(kCpuKs, stack);
  f.write_back();
  const size_t nret = schema.returns().size();
  const size_t rbase = stack->size() - nret;
  for (size_t i = 0; i < nret; ++i) {
    c10::IValue& v = (*stack)[rbase + i];
    if (v.isTensor() || v.isTensorList() || v.isOptionalTensorList()) v = map_ivalue(v, f, false);
  }
}

void dev_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  g_fallback_calls.fetch_add(1, std::memory_order_relaxed);
  if (g_count_ops) g_op_counts[op.schema().operator_name().name + "." +
                               op.schema().operator_name().overload_name]++;
  if (g_mode.load(std::memory_order_relaxed) == 1) {
    at::native::cpu_fallback(op, stack);
  } else {
    alias_fallback(op, stack);
  }
}

// ---------------------------------------------------------------- explicit kernels
at::Tensor dev_empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout>, std::optional<at::Device>,
                     std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &g_alloc, kDevKs, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor dev_empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                             std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &g_alloc, kDevKs,
                                           c10::dtype_or_default(dtype));
}

at::Tensor& dev_copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  at::Tensor dst = as_cpu(self);
  dst.copy_(as_cpu(src), non_blocking);
  return self;
}

at::Tensor dev_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = as_cpu(dst);
  d.copy_(as_cpu(self), non_blocking);
  return dst;
}

at::Tensor dev_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  at::Tensor d = as_cpu(dst);
  d.copy_(as_cpu(self));
  return dst;
}

at::Scalar dev_local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(cpu_alias(self));
}

at::Tensor& dev_set_empty(at::Tensor& self) {
  c10::Storage s(c10::Storage::use_byte_size_t(), 0, &g_alloc, /*resizable=*/true);
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(s));
  self.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  return self;
}

at::Tensor& dev_set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                            c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset.expect_int(),
                                      C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

// Scaled-dot-product attention asks a per-device stub which kernel to use; give
// the CPU's answer (the flash CPU kernel), as the fallback then runs CPU kernels.
int64_t dev_fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, double dropout_p,
                             bool is_causal, std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> m;
  if (mask.has_value()) m = as_cpu(*mask);
  return at::_fused_sdp_choice(as_cpu(q), as_cpu(k), as_cpu(v), m, dropout_p, is_causal, scale,
                               enable_gqa);
}

std::unique_ptr<torch::Library> g_routed;

// Give these ops a PrivateUse1 kernel = the boxed fallback, so that they reach the
// CPU kernel whole instead of a device-generic composite decomposition.
void route_to_fallback(const std::vector<std::string>& names) {
  if (!g_routed)
    g_routed = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::PrivateUse1, __FILE__,
                                                __LINE__);
  for (const auto& n : names)
    g_routed->impl(n.c_str(), torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
}

}  // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &dev_fused_sdp_choice)
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(dev_empty));
  m.impl("empty_strided", TORCH_FN(dev_empty_strided));
  m.impl("copy_", TORCH_FN(dev_copy_));
  m.impl("_copy_from", TORCH_FN(dev_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(dev_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(dev_local_scalar_dense));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("resize_", TORCH_FN(at::native::resize_));
  m.impl("set_", TORCH_FN(dev_set_empty));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(dev_set_storage));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  // Composite kernels that pick a backend by device type (and would land on
  // convolution_overrideable for PrivateUse1): send them to the fallback whole.
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
}

void set_mode(int mode) {
  TORCH_CHECK(mode == 0 || mode == 1, "mode must be 0 (alias) or 1 (copy)");
  g_mode = mode;
}

void register_hooks() { at::RegisterPrivateUse1HooksInterface(&g_hooks); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_mode", &set_mode, "0: aliasing fallback, 1: copying fallback (at::native::cpu_fallback)");
  m.def("get_mode", []() { return g_mode.load(); });
  m.def("register_hooks", &register_hooks);
  m.def("fallback_calls", []() { return g_fallback_calls.load(); });
  m.def("count_ops", [](bool on) { g_count_ops = on; });
  m.def("op_counts", []() { return g_op_counts; });
  m.def("route_to_fallback", &route_to_fallback);
  m.def("cpu_alias", &cpu_alias, "CPU tensor sharing the memory of a cppdev tensor");
}
