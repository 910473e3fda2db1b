// The emulated device (tpu / neuron) as a C++ PrivateUse1 backend.
//
// Device memory is CPU memory and every op runs torch's CPU kernel, as in the Python
// emulator, but the per-op path is C++: one boxed fallback replaces each device tensor
// argument by a CPU tensor over the same memory (no copy), redispatches to the CPU
// kernel and adopts the results as device tensors (no copy). The Python side
// (native/register.py) renames PrivateUse1, routes ops that would otherwise run a
// device-generic composite to the fallback, and reuses the Python emulator's device
// module, autocast, RNN, CUDA-recording, compile, distributed and pinning parts.
// What the harness reports is counted here, cheaply: ops (by name, float64 use),
// host-to-device transfers, per-device memory; syncs (.item(), device-to-host copies)
// are rare and call back into Python, which knows the user's call site.
// Measured design: benchmarks/cpp_backend/README.md.

#include <torch/extension.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <pthread.h>

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 64;
const c10::DispatchKeySet kDevKs(c10::DispatchKey::PrivateUse1);
const c10::DispatchKeySet kCpuKs(c10::DispatchKey::CPU);

std::string g_name = "privateuseone";  // the device's name (set by configure)
std::atomic<int> g_count{1};            // how many ordinals
thread_local int t_current = 0;         // this thread's current ordinal

std::string g_ordinal_note;             // why an ordinal is out of range (set_ordinal_note)

int check_index(int index) {
  int n = g_count.load(std::memory_order_relaxed);
  TORCH_CHECK(index >= 0 && index < n, g_name, " error: invalid device ordinal ", index, " (",
              g_ordinal_note, ")");
  return index;
}

// Device use in a forked child (refuse_forked; state.py keeps the Python backend's flags):
// the child of a process that had used the device raises g_fork_error at its first use.
std::atomic<bool> g_initialized{false};
std::atomic<bool> g_bad_fork{false};
std::string g_fork_error;

void after_fork_in_child() { g_bad_fork = g_initialized.load(); }

// The device's first use in this process (on_first_use): a Python callable that returns the
// error of the device's start ("" when it starts: TorchTPU's launch check, state.py); never
// released, it lives as long as the process.
PyObject* g_first_use = nullptr;

void first_use() {
  if (g_first_use != nullptr) {
    std::string error;
    {
      pybind11::gil_scoped_acquire gil;
      error = pybind11::reinterpret_borrow<pybind11::object>(g_first_use)().cast<std::string>();
    }
    TORCH_CHECK(error.empty(), error);
  }
  g_initialized.store(true, std::memory_order_relaxed);
}

inline void touch() {
  TORCH_CHECK(!g_bad_fork.load(std::memory_order_relaxed), g_fork_error);
  if (!g_initialized.load(std::memory_order_relaxed)) first_use();
}

int index_of(const std::optional<c10::Device>& d) {
  if (d.has_value() && d->type() == kDev && d->has_index()) return check_index(d->index());
  return t_current;
}

c10::Device dev(int index) { return c10::Device(kDev, static_cast<c10::DeviceIndex>(index)); }

// ---------------------------------------------------------------- counters
thread_local int t_quiet = 0;  // inside counters.quiet(): printing, tolist
std::mutex g_ops_mu;
struct OpCount {
  std::string name;
  int64_t calls = 0;
  int64_t float64 = 0;
};
std::unordered_map<const void*, OpCount> g_ops;  // key: the operator's schema
std::atomic<int64_t> g_ops_total{0};
std::atomic<int64_t> g_h2d_count{0}, g_h2d_bytes{0};
PyObject* g_on_sync = nullptr;  // Python: on_sync(kind, d2h_bytes)
thread_local const char* t_copy_kind = nullptr;  // "to_cpu" inside _to_copy

void count_op(const void* key, const std::string& name, bool float64) {
  if (t_quiet) return;
  g_ops_total.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_ops_mu);
  OpCount& c = g_ops[key];
  if (c.name.empty()) c.name = name;
  c.calls++;
  if (float64) c.float64++;
}

void count_schema(const c10::FunctionSchema& schema, bool float64) {
  if (t_quiet) return;
  count_op(&schema, schema.name(), float64);
}

void count_named(const char* name, bool float64 = false) {
  if (t_quiet) return;
  count_op(name, std::string("aten::") + name, float64);
}

int64_t nbytes_of(const at::Tensor& t) { return t.numel() * t.element_size(); }

// A host sync: reported to Python (rare; it records the user's call site).
void report_sync(const char* kind, int64_t d2h_bytes) {
  if (g_on_sync == nullptr || !Py_IsInitialized()) return;
  pybind11::gil_scoped_acquire gil;
  PyObject* r = PyObject_CallFunction(g_on_sync, "sL", kind, static_cast<long long>(d2h_bytes));
  if (r == nullptr) {
    PyErr_WriteUnraisable(g_on_sync);  // a counter must never break the program
    return;
  }
  Py_DECREF(r);
}

void record_copy(const at::Tensor& dst, const at::Tensor& src) {
  bool to_dev = dst.device().type() == kDev, from_dev = src.device().type() == kDev;
  if (to_dev && !from_dev) {
    if (t_quiet) return;
    g_h2d_count.fetch_add(1, std::memory_order_relaxed);
    g_h2d_bytes.fetch_add(nbytes_of(src), std::memory_order_relaxed);
  } else if (from_dev && !to_dev) {
    report_sync(t_copy_kind ? t_copy_kind : "copy_to_host", nbytes_of(src));
  }
}

// ---------------------------------------------------------------- memory books
struct Books {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0, allocs = 0, frees = 0;
};
std::mutex g_books_mu;
Books g_books[kMaxDevices];

void books_alloc(int index, int64_t n) {
  if (n == 0) return;
  std::lock_guard<std::mutex> lock(g_books_mu);
  Books& b = g_books[index];
  b.current += n;
  b.allocated += n;
  b.allocs++;
  if (b.current > b.peak) b.peak = b.current;
}

void books_free(int index, int64_t n) {
  if (n == 0) return;
  std::lock_guard<std::mutex> lock(g_books_mu);
  Books& b = g_books[index];
  b.current -= n;
  b.freed += n;
  b.frees++;
}

// ---------------------------------------------------------------- allocator
// Each block starts with a header (its device and size) so that the deleter can keep
// the books; the data follows at kHeader bytes (alignment kept).
constexpr size_t kHeader = 64;
struct Header {
  int64_t index;
  int64_t nbytes;
};

void dev_delete(void* ctx) {
  auto* h = static_cast<Header*>(ctx);
  books_free(static_cast<int>(h->index), h->nbytes);
  c10::free_cpu(ctx);
}

struct DevAllocator final : c10::Allocator {
  int index = 0;
  c10::DataPtr allocate(size_t n) override {
    touch();
    if (n == 0) return {nullptr, nullptr, &dev_delete, dev(index)};
    void* base = c10::alloc_cpu(n + kHeader);
    auto* h = static_cast<Header*>(base);
    h->index = index;
    h->nbytes = static_cast<int64_t>(n);
    books_alloc(index, static_cast<int64_t>(n));
    return {static_cast<char*>(base) + kHeader, base, &dev_delete, dev(index)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, size_t n) const override {
    default_copy_data(dst, src, n);
  }
};
DevAllocator g_allocs[kMaxDevices];

struct CurrentAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override { return g_allocs[t_current].allocate(n); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dst, const void* src, size_t n) const override {
    default_copy_data(dst, src, n);
  }
};
CurrentAllocator g_current_alloc;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_current_alloc)

// A CPU kernel's fresh result, adopted as device memory: the deleter keeps the books.
struct Adopted {
  c10::DataPtr inner;
  int index;
  int64_t nbytes;
};

void adopted_delete(void* ctx) {
  auto* a = static_cast<Adopted*>(ctx);
  books_free(a->index, a->nbytes);
  delete a;
}

// ---------------------------------------------------------------- device guard
struct DevGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = dev(t_current);
    if (d.index() >= 0) t_current = check_index(d.index());
    return old;
  }
  c10::Device getDevice() const override { return dev(t_current); }
  void setDevice(c10::Device d) const override {
    if (d.index() >= 0) t_current = check_index(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_count.load()) t_current = d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int = 0) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_count.load());
  }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, DevGuardImpl)

// ---------------------------------------------------------------- hooks
struct DevHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();  // the device draws from the CPU generator
  }
  at::Device getDeviceFromPtr(void*) const override { return dev(t_current); }
  // x.to("cpu", non_blocking=True) allocates its result pinned; the device's memory is host
  // memory, so the CPU allocator serves (the Python side makes Tensor.pin_memory a copy).
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_count.load());
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(t_current);
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { t_current = check_index(d); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    int old = t_current;
    t_current = check_index(d);
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t n) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), n);
  }
};
DevHooks g_hooks;

// ---------------------------------------------------------------- generators
// Device generators are CPU generators that Python marks as the device's (generator.py);
// a default one stands for the CPU default generator.
std::mutex g_gen_mu;
std::unordered_map<const c10::GeneratorImpl*, bool> g_generators;  // impl -> is default

c10::IValue device_generator(const c10::IValue& v) {
  const c10::GeneratorImpl* impl = v.toGenerator().unsafeGetGeneratorImpl();
  bool is_default = false;
  {
    std::lock_guard<std::mutex> lock(g_gen_mu);
    auto it = g_generators.find(impl);
    TORCH_CHECK(it != g_generators.end(), "Expected a '", g_name,
                "' device type for generator but found '", v.toGenerator().device().type(),
                "'. (Create it with torch.Generator(device='", g_name, "').)");
    is_default = it->second;
  }
  if (is_default) return c10::IValue(at::detail::getDefaultCPUGenerator());
  return v;
}

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
  return c10::Storage(c10::Storage::use_byte_size_t(), impl->nbytes(), std::move(ptr), allocator,
                      /*resizable=*/true);
}

at::Tensor make_tensor_on(c10::Storage storage, c10::DispatchKeySet ks, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), ks, like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                 like.storage_offset());
  // The lazy conjugate / negative bits are dispatch keys, not in `ks`: keep them, or a
  // conj() view (an ifft of real input) would read as the unconjugated values.
  if (like.is_conj()) t._set_conj(true);
  if (like.is_neg()) t._set_neg(true);
  return t;
}

// CPU tensor over the same memory as device tensor `t` (no copy).
at::Tensor cpu_alias(const at::Tensor& t) {
  return make_tensor_on(
      alias_storage(t.storage(), c10::Device(c10::kCPU), c10::GetCPUAllocator()), kCpuKs, t);
}

at::Tensor as_cpu(const at::Tensor& t) {
  return (t.defined() && t.device().type() == kDev) ? cpu_alias(t) : t;
}

// ---------------------------------------------------------------- device checks
std::unordered_set<std::string> g_mixed_ok;  // ops that take CPU and device tensors together
std::unordered_map<std::string, std::string> g_refused;  // op -> why it is not emulated

void for_each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& fn) {
  if (v.isTensor()) {
    fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) fn(t);
  } else if (v.isOptionalTensorList()) {
    for (std::optional<at::Tensor> t : v.toOptionalTensorList())
      if (t.has_value()) fn(*t);
  } else if (v.isList()) {  // Tensor[][] (c10d collectives)
    for (const c10::IValue& item : v.toListRef()) for_each_tensor(item, fn);
  }
}

bool holds_tensors(const c10::IValue& v) {
  if (v.isTensor() || v.isTensorList() || v.isOptionalTensorList()) return true;
  if (!v.isList() || v.isIntList() || v.isDoubleList() || v.isBoolList()) return false;
  for (const c10::IValue& item : v.toListRef())
    if (holds_tensors(item)) return true;
  return false;
}

// torch's own texts for a device mismatch (see tensor.py's _mismatch for the two kinds).
[[noreturn]] void raise_mismatch(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                 size_t base) {
  const auto& args = op.schema().arguments();
  std::vector<std::pair<std::string, c10::Device>> named;
  for (size_t i = 0; i < args.size(); ++i) {
    for_each_tensor(stack[base + i], [&](const at::Tensor& t) {
      if (t.defined() && !(t.device().is_cpu() && t.dim() == 0))
        named.emplace_back(args[i].name(), t.device());
    });
  }
  const std::string prefix = "Expected all tensors to be on the same device, but ";
  std::string name = op.schema().name();
  name = name.substr(name.find("::") + 2);
  if (op.hasTag(at::Tag::pointwise) || op.hasTag(at::Tag::reduction) ||
      name.rfind("_foreach_", 0) == 0) {
    std::optional<c10::Device> common;
    for (auto& [n, d] : named)
      if (!d.is_cpu()) {
        common = d;
        break;
      }
    for (auto& [n, d] : named)
      if (d != *common)
        TORCH_CHECK(false, prefix, "found at least two devices, ", common->str(), " and ",
                    d.str(), "!");
  }
  c10::Device common = named.front().second;
  for (auto& [n, d] : named)
    if (d != common)
      TORCH_CHECK(false, prefix, "got ", n, " is on ", d.str(),
                  ", different from other tensors on ", common.str(),
                  " (when checking argument in method wrapper_PrivateUse1_", name, ")");
  TORCH_CHECK(false, prefix, "found a mix of devices");
}

// ---------------------------------------------------------------- the boxed fallback
struct Frame {
  int index = -1;                 // the device the op runs on
  bool result_on_cpu = false;     // device= "cpu" was asked for
  bool float64 = false;
  // alias storage impl -> original device storage
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> storages;
  // alias tensor -> original device tensor (the alias is kept alive: the kernel pops it)
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors;
  std::vector<c10::TensorImpl*> cpu_inputs;  // CPU arguments: returned as they are
  // sparse CPU alias -> original sparse device tensor (indices and values aliased)
  std::vector<std::pair<at::Tensor, at::Tensor>> sparse;
  // fresh CPU storage impl -> adopted device storage (when shared by several results)
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> adopted;

  at::Tensor in(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.scalar_type() == at::kDouble) float64 = true;
    if (t.device().type() != kDev) {
      cpu_inputs.push_back(t.unsafeGetTensorImpl());
      return t;
    }
    if (t.layout() == c10::kSparse) return sparse_in(t);
    at::Tensor a = cpu_alias(t);
    storages.emplace_back(a.storage().unsafeGetStorageImpl(), t.storage());
    tensors.emplace_back(a, t);
    return a;
  }

  // A sparse COO device tensor: a CPU one over aliases of its indices and values.
  at::Tensor sparse_in(const at::Tensor& t) {
    at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(t);
    at::Tensor indices = in(impl->indices()), values = in(impl->values());
    at::Tensor a = at::detail::make_tensor<at::SparseTensorImpl>(
        c10::DispatchKeySet(c10::DispatchKey::SparseCPU), t.dtype());
    copy_sparse(a, indices, values, impl, t.sizes());
    sparse.emplace_back(a, t);
    return a;
  }

  static void copy_sparse(const at::Tensor& to, const at::Tensor& indices, const at::Tensor& values,
                          const at::SparseTensorImpl* from, at::IntArrayRef sizes) {
    at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(to);
    impl->raw_resize_(from->sparse_dim(), from->dense_dim(), sizes);
    impl->set_indices_and_values_unsafe(indices, values);
    impl->set_coalesced(from->coalesced());
  }

  // A sparse CPU result (or a mutated sparse argument) as a device tensor.
  at::Tensor sparse_out(const at::Tensor& t) {
    for (auto& [alias, orig] : sparse)
      if (alias.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return orig;
    at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(t);
    at::Tensor indices = out(impl->indices()), values = out(impl->values());
    c10::DeviceGuard guard(values.device());
    at::Tensor r = at::detail::make_tensor<at::SparseTensorImpl>(
        c10::DispatchKeySet(c10::DispatchKey::SparsePrivateUse1), t.dtype());
    copy_sparse(r, indices, values, impl, t.sizes());
    return r;
  }

  // After the CPU kernel ran: propagate metadata / reallocation of a mutated argument.
  void write_back() {
    for (auto& [alias, orig] : sparse) {
      at::SparseTensorImpl* a = at::sparse::get_sparse_impl(alias);
      copy_sparse(orig, out(a->indices()), out(a->values()), a, alias.sizes());
    }
    for (auto& [alias, orig] : tensors) {
      c10::TensorImpl* aimpl = alias.unsafeGetTensorImpl();
      c10::TensorImpl* o = orig.unsafeGetTensorImpl();
      c10::StorageImpl* as = aimpl->storage().unsafeGetStorageImpl();
      c10::StorageImpl* os = o->storage().unsafeGetStorageImpl();
      if (as->_mutable_data_ptr_no_checks().get() != os->_mutable_data_ptr_no_checks().get() ||
          as->nbytes() != os->nbytes()) {
        // The kernel resized (reallocated) the alias: its new buffer becomes device memory.
        TORCH_CHECK(as->_mutable_data_ptr_no_checks().get_deleter() != &release_storage,
                    g_name, " emulator: argument storage was replaced by the CPU kernel");
        int index = o->device().index();
        int64_t n = static_cast<int64_t>(as->nbytes());
        c10::DataPtr moved = std::move(as->_mutable_data_ptr_no_checks());
        as->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
        as->set_nbytes(0);
        void* data = moved.get();
        books_alloc(index, n);
        os->set_data_ptr_noswap(
            c10::DataPtr(data, new Adopted{std::move(moved), index, n}, &adopted_delete, dev(index)));
        os->set_nbytes(static_cast<size_t>(n));
      }
      if (o->sizes() != aimpl->sizes() || o->strides() != aimpl->strides() ||
          o->storage_offset() != aimpl->storage_offset()) {
        o->set_sizes_and_strides(aimpl->sizes(), aimpl->strides(), aimpl->storage_offset());
      }
    }
  }

  at::Tensor out(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    if (t.scalar_type() == at::kDouble) float64 = true;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    for (auto& [alias, orig] : tensors)
      if (alias.unsafeGetTensorImpl() == impl) return orig;  // in-place / out= result
    for (c10::TensorImpl* c : cpu_inputs)
      if (c == impl) return t;  // a CPU argument given back
    if (result_on_cpu) return t;
    if (t.layout() == c10::kSparse) return sparse_out(t);
    if (t.layout() != c10::kStrided) return t;
    c10::StorageImpl* s = impl->storage().unsafeGetStorageImpl();
    for (auto& [aimpl_s, orig_s] : storages)
      if (aimpl_s == s) return make_tensor_on(orig_s, kDevKs, t);  // view of an argument
    for (auto& [cpu_s, dev_s] : adopted)
      if (cpu_s == s) return make_tensor_on(dev_s, kDevKs, t);
    // A fresh result: adopt its memory as device memory, without a copy.
    int idx = index < 0 ? t_current : index;
    c10::Storage dev_s;
    if (c10::raw::intrusive_ptr::use_count(s) == 1 && c10::raw::intrusive_ptr::use_count(impl) <= 2 &&
        s->_mutable_data_ptr_no_checks().get_deleter() != &release_storage) {
      // Sole owner: take over the buffer itself (the CPU tensor is dropped right after).
      int64_t n = static_cast<int64_t>(s->nbytes());
      c10::DataPtr inner = std::move(s->_mutable_data_ptr_no_checks());
      void* data = inner.get();
      books_alloc(idx, n);
      s->set_data_ptr_noswap(
          c10::DataPtr(data, new Adopted{std::move(inner), idx, n}, &adopted_delete, dev(idx)));
      s->set_allocator(&g_allocs[idx]);
      dev_s = impl->storage();
    } else {
      dev_s = alias_storage(impl->storage(), dev(idx), &g_allocs[idx]);
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
  if (v.isList() && holds_tensors(v)) {  // Tensor[][] (c10d collectives)
    auto l = v.toList();
    c10::impl::GenericList r(l.elementType());
    r.reserve(l.size());
    for (const c10::IValue& item : l) r.push_back(map_ivalue(item, f, inbound));
    return r;
  }
  return v;
}

// The device the op runs on, checked as torch checks it (none: -1).
int op_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base,
              size_t nargs) {
  int index = -1;
  bool cpu = false, mixed = false;
  for (size_t i = 0; i < nargs; ++i) {
    for_each_tensor(stack[base + i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (t.device().type() == kDev) {
        int d = t.device().index();
        if (index >= 0 && d != index) mixed = true;
        if (index < 0) index = d;
      } else if (t.dim() > 0) {
        cpu = true;
      }
    });
  }
  if (mixed || (cpu && index >= 0 && !g_mixed_ok.count(op.schema().operator_name().name + "." +
                                                       op.schema().overload_name())))
    raise_mismatch(op, stack, base);
  return index;
}

// ---------------------------------------------------------------- matmul precision
// TorchTPU computes float32 matmul-class ops in bfloat16 passes (sandbox/emulator/precision.py
// says how and why). While a level below HIGHEST is in force (`g_reduced`, set from Python
// whenever it changes), the fallback hands those ops (`g_precision_ops`, by schema) with
// their CPU arguments to Python's precision.run_by_name, which returns the results.
std::atomic<bool> g_reduced{false};
std::unordered_map<const void*, std::string> g_precision_ops;  // schema -> ns::op.overload
PyObject* g_precision_hook = nullptr;  // Python: run_by_name(name, args) -> result(s)

bool float32_operand(const torch::jit::Stack& stack, size_t base, size_t nargs) {
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& v = stack[base + i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == at::kFloat)
      return true;
  }
  return false;
}

// Run `op` through Python's precision rules: the CPU arguments on the stack are replaced by
// its results. False (stack untouched) when the op is not one of them.
bool run_with_precision(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base,
                        size_t nargs) {
  if (!g_reduced.load(std::memory_order_relaxed) || g_precision_hook == nullptr) return false;
  const c10::FunctionSchema& schema = op.schema();
  auto it = g_precision_ops.find(&schema);
  if (it == g_precision_ops.end() || !float32_operand(*stack, base, nargs)) return false;
  pybind11::gil_scoped_acquire gil;
  pybind11::list args;
  for (size_t i = 0; i < nargs; ++i) args.append(torch::jit::toPyObject((*stack)[base + i]));
  pybind11::object result =
      pybind11::reinterpret_borrow<pybind11::object>(g_precision_hook)(it->second, args);
  torch::jit::drop(*stack, nargs);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(result, returns[0].type()));
  } else {
    pybind11::tuple items = result.cast<pybind11::tuple>();
    for (size_t i = 0; i < returns.size(); ++i)
      stack->push_back(torch::jit::toIValue(items[i], returns[i].type()));
  }
  return true;
}

// The boxed fallback: run `op` by its CPU kernel (SparseCPU for sparse device tensors).
template <c10::DispatchKey cpu_key>
void fallback_to(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  touch();
  Frame f;
  f.index = op_device(op, *stack, base, nargs);
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (holds_tensors(v)) {
      v = map_ivalue(v, f, true);
    } else if (v.isDevice()) {
      c10::Device d = v.toDevice();
      if (d.type() == kDev) {
        f.index = index_of(d);
        v = c10::Device(c10::kCPU);
      } else if (d.is_cpu()) {
        f.result_on_cpu = true;
      }
    } else if (v.isGenerator()) {
      v = device_generator(v);
    }
  }
  if (cpu_key != c10::DispatchKey::CPU || !run_with_precision(op, stack, base, nargs))
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
  f.write_back();
  const size_t nret = schema.returns().size();
  const size_t rbase = stack->size() - nret;
  for (size_t i = 0; i < nret; ++i) {
    c10::IValue& v = (*stack)[rbase + i];
    if (holds_tensors(v)) v = map_ivalue(v, f, false);
  }
  count_schema(schema, f.float64);
}

void dev_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to<c10::DispatchKey::CPU>(op, stack);
}

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  fallback_to<c10::DispatchKey::SparseCPU>(op, stack);
}

void refused(const c10::OperatorHandle& op, torch::jit::Stack*) {
  const auto& name = op.schema().operator_name();
  auto it = g_refused.find(name.name + "." + name.overload_name);
  TORCH_CHECK_NOT_IMPLEMENTED(false, it == g_refused.end() ? "not emulated" : it->second);
}

// ---------------------------------------------------------------- explicit kernels
at::Tensor dev_empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout>, std::optional<at::Device> device,
                     std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  auto dt = c10::dtype_or_default(dtype);
  count_named("empty", dt == at::kDouble);
  return at::detail::empty_generic(size, &g_allocs[index_of(device)], kDevKs, dt, memory_format);
}

at::Tensor dev_empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                             std::optional<at::Device> device, std::optional<bool>) {
  auto dt = c10::dtype_or_default(dtype);
  count_named("empty_strided", dt == at::kDouble);
  return at::detail::empty_strided_generic(size, stride, &g_allocs[index_of(device)], kDevKs, dt);
}

at::Tensor& dev_copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  count_named("copy_", self.scalar_type() == at::kDouble || src.scalar_type() == at::kDouble);
  record_copy(self, src);
  at::Tensor dst = as_cpu(self);
  dst.copy_(as_cpu(src), non_blocking);
  return self;
}

at::Tensor dev_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  count_named("_copy_from");
  record_copy(dst, self);
  at::Tensor d = as_cpu(dst);
  d.copy_(as_cpu(self), non_blocking);
  return dst;
}

at::Tensor dev_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  count_named("_copy_from_and_resize");
  record_copy(dst, self);
  at::native::resize_(dst, self.sizes(), std::nullopt);
  at::Tensor d = as_cpu(dst);
  d.copy_(as_cpu(self));
  return dst;
}

at::Tensor dev_to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                       std::optional<at::Layout> layout, std::optional<at::Device> device,
                       std::optional<bool> pin_memory, bool non_blocking,
                       std::optional<at::MemoryFormat> memory_format) {
  count_named("_to_copy", self.scalar_type() == at::kDouble || dtype == at::kDouble);
  const char* saved = t_copy_kind;
  t_copy_kind = (device.has_value() && device->is_cpu()) ? "to_cpu" : nullptr;
  struct Restore {
    const char* k;
    ~Restore() { t_copy_kind = k; }
  } restore{saved};
  if (device.has_value() && device->type() == kDev) index_of(device);  // check the ordinal
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking,
                              memory_format);
}

at::Scalar dev_local_scalar_dense(const at::Tensor& self) {
  count_named("_local_scalar_dense", self.scalar_type() == at::kDouble);
  report_sync("item", 0);
  return at::_local_scalar_dense(cpu_alias(self));
}

at::Tensor dev_view(const at::Tensor& self, c10::SymIntArrayRef size) {
  count_named("view");
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor dev_as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  count_named("as_strided");
  std::optional<int64_t> off;
  if (offset.has_value()) off = offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor dev_reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                             c10::SymIntArrayRef stride) {
  count_named("_reshape_alias");
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& dev_resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                              std::optional<at::MemoryFormat> memory_format) {
  count_named("resize_");
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& dev_set_empty(at::Tensor& self) {
  count_named("set_");
  int index = self.device().index();
  c10::Storage s(c10::Storage::use_byte_size_t(), 0, &g_allocs[index], /*resizable=*/true);
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(s));
  self.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  return self;
}

at::Tensor& dev_set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                            c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  count_named("set_");
  return at::native::set_storage_cpu_(self, std::move(source), offset.expect_int(),
                                      C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& dev_set_source_storage(at::Tensor& self, c10::Storage source) {
  count_named("set_");
  return at::native::set_(self, std::move(source));
}

at::Tensor& dev_set_tensor(at::Tensor& self, const at::Tensor& source) {
  count_named("set_");
  return at::native::set_tensor_(self, source);
}

// The CPU alias of an input, needing gradients when the device tensor does: the CPU's
// kernel choice depends on it (its flash kernel has no gradient for attn_mask, so a learned
// bias takes the math kernel).
at::Tensor cpu_choosing(const at::Tensor& t) {
  at::Tensor c = as_cpu(t);
  return t.requires_grad() && !c.requires_grad() ? c.detach().requires_grad_(true) : c;
}

// Scaled-dot-product attention asks a per-device stub which kernel to use; give the
// CPU's answer, as the fallback then runs CPU kernels.
int64_t dev_fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, double dropout_p,
                             bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // float32 below HIGHEST: the math kernel, whose matmuls reach the precision rules (the
  // CPU's fused kernels compute in float32). 0 is sdp::SDPBackend::math.
  if (g_reduced.load(std::memory_order_relaxed) && q.scalar_type() == at::kFloat) return 0;
  std::optional<at::Tensor> m;
  if (mask.has_value() && mask->defined()) m = cpu_choosing(*mask);
  return at::_fused_sdp_choice(cpu_choosing(q), cpu_choosing(k), cpu_choosing(v), m, dropout_p,
                               is_causal, scale, enable_gqa);
}

// Libraries made at run time (routing, refusals), one per namespace; kept alive.
std::map<std::string, std::unique_ptr<torch::Library>> g_libraries;

torch::Library& library(const std::string& ns, c10::DispatchKey key) {
  auto& lib = g_libraries[ns + "/" + c10::toString(key)];
  if (!lib) lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__, __LINE__);
  return *lib;
}

std::pair<std::string, std::string> split_name(const std::string& qualified) {
  auto pos = qualified.find("::");
  TORCH_CHECK(pos != std::string::npos, "expected namespace::op, got ", qualified);
  return {qualified.substr(0, pos), qualified.substr(pos + 2)};
}

// Give these ops a PrivateUse1 kernel = the boxed fallback, so that they reach the CPU
// kernel whole instead of a device-generic composite decomposition (or, for c10d
// collectives, so that gloo gets CPU tensors).
// torch warns when a kernel replaces another one (the c10d collectives): intended here.
struct Silent final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

template <c10::BoxedKernel::BoxedKernelFunction* fn>
void register_boxed(const std::string& qualified,
                    c10::DispatchKey key = c10::DispatchKey::PrivateUse1) {
  auto [ns, op] = split_name(qualified);
  if (!op.empty() && op.back() == '.') op.pop_back();  // the default overload
  Silent silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  library(ns, key).impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<fn>());
}

void route_to_fallback(const std::vector<std::string>& names,
                       const std::vector<std::string>& sparse_names) {
  for (const auto& n : names) register_boxed<&dev_fallback>(n);
  for (const auto& n : sparse_names)
    register_boxed<&sparse_fallback>(n, c10::DispatchKey::SparsePrivateUse1);
}

// `qualified` is ns::op.overload, with the dot kept for the default overload.
void refuse(const std::string& qualified, const std::string& message) {
  g_refused[qualified] = message;
  register_boxed<&refused>(qualified);
}

}  // namespace

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &dev_fused_sdp_choice)
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
}

// Sparse COO device tensors (sparse gradients: nn.Embedding(sparse=True), SparseAdam).
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(dev_empty));
  m.impl("empty_strided", TORCH_FN(dev_empty_strided));
  m.impl("copy_", TORCH_FN(dev_copy_));
  m.impl("_copy_from", TORCH_FN(dev_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(dev_copy_from_and_resize));
  m.impl("_to_copy", TORCH_FN(dev_to_copy));
  m.impl("_local_scalar_dense", TORCH_FN(dev_local_scalar_dense));
  m.impl("view", TORCH_FN(dev_view));
  m.impl("as_strided", TORCH_FN(dev_as_strided));
  m.impl("_reshape_alias", TORCH_FN(dev_reshape_alias));
  m.impl("resize_", TORCH_FN(dev_resize_));
  m.impl("set_", TORCH_FN(dev_set_empty));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(dev_set_storage));
  m.impl("set_.source_Storage", TORCH_FN(dev_set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(dev_set_tensor));
  // Composite kernels that pick a backend by device type (and would land on
  // convolution_overrideable for PrivateUse1): send them to the fallback whole.
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&dev_fallback>());
}

namespace {

void configure(const std::string& name, int devices, const std::vector<std::string>& mixed_ok,
               pybind11::object on_sync) {
  TORCH_CHECK(devices >= 1 && devices <= kMaxDevices, "devices must be 1..", kMaxDevices);
  g_name = name;
  g_count = devices;
  for (int i = 0; i < kMaxDevices; ++i) g_allocs[i].index = i;
  g_mixed_ok.insert(mixed_ok.begin(), mixed_ok.end());
  Py_XDECREF(g_on_sync);
  g_on_sync = on_sync.release().ptr();  // kept for the process's life
  at::RegisterPrivateUse1HooksInterface(&g_hooks);
}

// The ops Python's precision rules apply to, and the function that applies them.
void set_precision_hook(const std::vector<std::string>& names, pybind11::object hook) {
  for (const auto& qualified : names) {
    auto [ns, rest] = split_name(qualified);
    auto dot = rest.find('.');
    std::string name = ns + "::" + rest.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : rest.substr(dot + 1);
    auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
    TORCH_CHECK(handle.has_value(), "no operator ", qualified);
    g_precision_ops[&handle->schema()] = qualified;
  }
  Py_XDECREF(g_precision_hook);
  g_precision_hook = hook.release().ptr();  // kept for the process's life
}

pybind11::dict op_counts() {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  pybind11::dict out;
  for (auto& [key, c] : g_ops) {
    if (c.calls == 0) continue;
    std::string name = c.name.substr(c.name.find("::") + 2);
    pybind11::str k(name);
    auto prev = out.contains(k) ? out[k].cast<std::pair<int64_t, int64_t>>()
                                : std::pair<int64_t, int64_t>{0, 0};
    out[k] = std::make_pair(prev.first + c.calls, prev.second + c.float64);
  }
  return out;
}

void reset_counts() {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  for (auto& [key, c] : g_ops) c.calls = c.float64 = 0;
  g_ops_total = 0;
  g_h2d_count = 0;
  g_h2d_bytes = 0;
}

std::vector<int64_t> memory_stats(int index) {
  check_index(index);
  std::lock_guard<std::mutex> lock(g_books_mu);
  const Books& b = g_books[index];
  return {b.current, b.peak, b.allocated, b.freed, b.allocs, b.frees};
}

void reset_peak(int index) {
  check_index(index);
  std::lock_guard<std::mutex> lock(g_books_mu);
  g_books[index].peak = g_books[index].current;
}

void reset_accumulated(int index) {
  check_index(index);
  std::lock_guard<std::mutex> lock(g_books_mu);
  Books& b = g_books[index];
  b.allocated = b.freed = b.allocs = b.frees = 0;
}

void mark_generator(intptr_t cdata, bool is_default) {
  std::lock_guard<std::mutex> lock(g_gen_mu);
  g_generators[reinterpret_cast<const c10::GeneratorImpl*>(cdata)] = is_default;
}

void forget_generator(intptr_t cdata) {
  std::lock_guard<std::mutex> lock(g_gen_mu);
  g_generators.erase(reinterpret_cast<const c10::GeneratorImpl*>(cdata));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("configure", &configure, "name, devices, mixed-device ops, on_sync(kind, d2h_bytes)");
  m.def("route_to_fallback", &route_to_fallback, "ns::op names to run through the fallback");
  m.def("refuse", &refuse, "ns::op.overload and the NotImplementedError it raises");
  m.def("current_device", []() { return t_current; });
  m.def("set_device", [](int index) { t_current = check_index(index); });
  m.def("set_ordinal_note", [](const std::string& note) { g_ordinal_note = note; });
  m.def("refuse_forked", [](const std::string& error) {
    g_fork_error = error;
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
  }, "refuse device use in a forked child of a process that used the device, with `error`");
  m.def("in_bad_fork", []() { return g_bad_fork.load(); });
  m.def("on_first_use", [](pybind11::object check) {
    g_first_use = check.release().ptr();
  }, "call `check` (-> error text, \"\" for none) at the device's first use in this process");
  m.def("touch", &touch, "the device is used (its first use runs the on_first_use check)");
  m.def("quiet", [](int delta) { t_quiet += delta; });
  m.def("op_counts", &op_counts, "name -> (calls, float64 calls)");
  m.def("ops_total", []() { return g_ops_total.load(); });
  m.def("h2d", []() { return std::make_pair(g_h2d_count.load(), g_h2d_bytes.load()); });
  m.def("reset_counts", &reset_counts);
  m.def("memory_stats", &memory_stats, "current, peak, allocated, freed, allocs, frees");
  m.def("reset_peak", &reset_peak);
  m.def("reset_accumulated", &reset_accumulated);
  m.def("mark_generator", &mark_generator);
  m.def("forget_generator", &forget_generator);
  m.def("set_precision_hook", &set_precision_hook, "ns::op.overload names, run(name, args)");
  m.def("set_precision_reduced", [](bool reduced) { g_reduced.store(reduced); });
}
