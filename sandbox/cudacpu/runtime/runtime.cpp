// torchport's CPU runner for CUDA kernels: the launch loop, the fibers that give
// __syncthreads() its meaning, and the count of launches the run reports. Compiled into
// every extension the runner builds (one copy per extension: no state is shared).
#include <cudacpu/runtime.h>

#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace cudacpu {
namespace {

constexpr size_t kStackBytes = size_t(128) << 10;  // per thread of a block with a barrier
constexpr unsigned int kMaxThreadsPerBlock = 1024;
// OS threads that run blocks of a kernel with a barrier at once: each holds a stack per
// thread of its block (up to 1024 x 128 KiB of address space), and a run's memory limit
// counts address space.
constexpr int64_t kFiberWorkers = 4;

enum class Mode { idle, plain, fibers };

struct Fiber {
  char* memory = nullptr;  // guard page, then the stack
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t context;
#endif
  bool done = false;
  uint3 index{0, 0, 0};
};

// One per OS thread: the blocks a thread runs, one after another.
struct Worker {
  Mode mode = Mode::idle;
  std::vector<Fiber> fibers;
  size_t current = 0;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
  ThreadBody body = nullptr;
  void* context = nullptr;
  std::exception_ptr error;
  void* shared = nullptr;  // dynamic shared memory (extern __shared__)
  size_t shared_bytes = 0;
  int count_sum = 0;  // __syncthreads_count: this barrier's sum, and the last one's
  int count_result = 0;

  ~Worker() {
    for (Fiber& f : fibers) {
      if (f.memory) munmap(f.memory, kStackBytes + page());
    }
    std::free(shared);
  }
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
};

thread_local Worker worker;
thread_local const KernelInfo* running = nullptr;  // the kernel this thread is inside

struct Running {
  explicit Running(const KernelInfo* info) { running = info; }
  ~Running() { running = nullptr; }
};

// --- a fault inside a kernel says which kernel, block and thread ---------------------------
// A kernel that reads or writes past its buffers may go unnoticed on a GPU (the caching
// allocator's blocks are large) but faults on the CPU. The handler writes what faulted to
// stderr and hands the signal back to the handler before it (the process then ends as it
// would have, with the message in its output). It runs on an alternate stack, so a fiber
// whose stack overflowed is reported too.
struct sigaction previous_segv, previous_bus;
std::once_flag handlers_installed;

void put(char*& at, const char* end, const char* text) {
  while (*text && at < end) *at++ = *text++;
}
void put(char*& at, const char* end, unsigned long long v) {
  char digits[24];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + v % 10); while ((v /= 10) && n < 24);
  while (n && at < end) *at++ = digits[--n];
}
void put(char*& at, const char* end, const uint3& v) {
  put(at, end, "(");
  put(at, end, v.x);
  put(at, end, ", ");
  put(at, end, v.y);
  put(at, end, ", ");
  put(at, end, v.z);
  put(at, end, ")");
}

bool in_guard_page(const Worker& w, const void* address) {
  const char* a = static_cast<const char*>(address);
  for (const Fiber& f : w.fibers) {
    if (f.memory && a >= f.memory && a < f.memory + Worker::page()) return true;
  }
  return false;
}

void on_fault(int signal, siginfo_t* info, void*) {
  struct sigaction& before = signal == SIGBUS ? previous_bus : previous_segv;
  if (running != nullptr) {
    char text[512];
    char* at = text;
    const char* end = text + sizeof(text) - 1;
    put(at, end, "torchport CPU runner: kernel ");
    put(at, end, running->name);
    put(at, end, " faulted in block ");
    put(at, end, blockIdx);
    put(at, end, ", thread ");
    put(at, end, threadIdx);
    if (in_guard_page(worker, info->si_addr)) {
      put(at, end, ": the thread's stack (128 KiB on the CPU) overflowed\n");
    } else {
      put(at, end,
          ": it reads or writes memory outside its buffers (out of bounds: undefined "
          "behaviour on a GPU too, where it may go unnoticed)\n");
    }
    ssize_t ignored = write(2, text, static_cast<size_t>(at - text));
    (void)ignored;
    running = nullptr;
  }
  sigaction(signal, &before, nullptr);  // the fault repeats there when this returns
}

void install_fault_handlers() {
  std::call_once(handlers_installed, [] {
    struct sigaction action {};
    action.sa_sigaction = &on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_segv);
    sigaction(SIGBUS, &action, &previous_bus);
  });
}

// The alternate stack the handler runs on, one per OS thread that runs kernels.
void ensure_signal_stack() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
  static thread_local char memory[64 << 10];
  stack_t alt{};
  alt.ss_sp = memory;
  alt.ss_size = sizeof(memory);
  sigaltstack(&alt, nullptr);
}

std::mutex launches_mutex;
std::map<std::string, long long> launches;
std::string launch_report;

#if defined(__x86_64__)
// Save the callee-saved registers and the stack pointer in *from, load those of `to`.
extern "C" void cudacpu_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl cudacpu_switch
  .hidden cudacpu_switch
  .type cudacpu_switch,@function
cudacpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cudacpu_switch,.-cudacpu_switch
)");
#endif

[[noreturn]] void fiber_main() {
  Worker& w = worker;
  try {
    w.body(w.context);
  } catch (...) {
    w.error = std::current_exception();
  }
  Fiber& f = w.fibers[w.current];
  f.done = true;
#if defined(__x86_64__)
  cudacpu_switch(&f.sp, w.scheduler_sp);
#else
  swapcontext(&f.context, &w.scheduler);
#endif
  std::abort();  // a finished fiber is never resumed
}

char* stack_of(Fiber& f) {
  if (f.memory == nullptr) {
    void* m = mmap(nullptr, kStackBytes + Worker::page(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(m != MAP_FAILED, "torchport CPU runner: no memory for a thread's stack");
    mprotect(m, Worker::page(), PROT_NONE);  // an overflow faults instead of corrupting
    f.memory = static_cast<char*>(m);
  }
  return f.memory + Worker::page();
}

void start_fiber(Fiber& f) {
  char* stack = stack_of(f);
#if defined(__x86_64__)
  auto top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t(15);
  auto* slots = reinterpret_cast<void**>(top);
  slots[-1] = nullptr;                                    // fiber_main's return address
  slots[-2] = reinterpret_cast<void*>(&fiber_main);       // where the first switch returns
  for (int i = 3; i <= 8; ++i) slots[-i] = nullptr;       // rbp, rbx, r12-r15
  f.sp = &slots[-8];
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, reinterpret_cast<void (*)()>(&fiber_main), 0);
#endif
  f.done = false;
}

void resume(Worker& w, Fiber& f) {
#if defined(__x86_64__)
  cudacpu_switch(&w.scheduler_sp, f.sp);
#else
  swapcontext(&w.scheduler, &f.context);
#endif
}

// Every thread of the block runs to its next barrier (or its end), in turn; then the next
// round starts. No thread passes a barrier before all the others reach it.
void run_block_fibers(Worker& w, const dim3& block) {
  const size_t n = size_t(block.x) * block.y * block.z;
  if (w.fibers.size() < n) w.fibers.resize(n);
  size_t i = 0;
  for (unsigned int z = 0; z < block.z; ++z)
    for (unsigned int y = 0; y < block.y; ++y)
      for (unsigned int x = 0; x < block.x; ++x, ++i) {
        w.fibers[i].index = uint3{x, y, z};
        start_fiber(w.fibers[i]);
      }
  size_t live = n;
  w.mode = Mode::fibers;
  while (live > 0) {
    w.count_sum = 0;
    for (i = 0; i < n; ++i) {
      Fiber& f = w.fibers[i];
      if (f.done) continue;
      threadIdx = f.index;
      w.current = i;
      resume(w, f);
      if (w.error) {
        w.mode = Mode::idle;
        std::exception_ptr error = w.error;
        w.error = nullptr;
        std::rethrow_exception(error);
      }
      if (f.done) --live;
    }
    w.count_result = w.count_sum;
  }
}

void run_block_plain(Worker& w, const dim3& block) {
  w.mode = Mode::plain;
  for (unsigned int z = 0; z < block.z; ++z)
    for (unsigned int y = 0; y < block.y; ++y)
      for (unsigned int x = 0; x < block.x; ++x) {
        threadIdx = uint3{x, y, z};
        w.body(w.context);
      }
}

void count_launch(const char* name) {
  std::lock_guard<std::mutex> lock(launches_mutex);
  ++launches[name];
}

}  // namespace

void run_grid(const KernelInfo& info, dim3 grid, dim3 block, size_t shared_bytes,
              ThreadBody body, void* context) {
  count_launch(info.name);
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  TORCH_CHECK(threads >= 1 && threads <= kMaxThreadsPerBlock, "kernel ", info.name,
              " launched with ", block.x, "x", block.y, "x", block.z,
              " threads per block: a GPU runs at most 1024 (the launch would fail there)");
  const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  if (blocks == 0) return;  // nothing to run (a GPU refuses the launch; unchecked, nothing runs)
  const bool fibers = info.barrier && threads > 1;
  install_fault_handlers();
  auto run_blocks = [&](int64_t begin, int64_t end) {
    Worker& w = worker;
    ensure_signal_stack();
    const Running inside(&info);
    if (w.shared_bytes < shared_bytes) {
      std::free(w.shared);
      w.shared = std::aligned_alloc(64, (shared_bytes + 63) / 64 * 64);
      TORCH_CHECK(w.shared != nullptr, "torchport CPU runner: no memory for shared memory");
      w.shared_bytes = shared_bytes;
    }
    gridDim = grid;
    blockDim = block;
    w.body = body;
    w.context = context;
    w.error = nullptr;
    for (int64_t b = begin; b < end; ++b) {
      blockIdx = uint3{unsigned(b % grid.x), unsigned((b / grid.x) % grid.y),
                       unsigned(b / (int64_t(grid.x) * grid.y))};
      if (fibers) {
        run_block_fibers(w, block);
      } else {
        run_block_plain(w, block);
      }
    }
    w.mode = Mode::idle;
  };
  if (info.atomics || blocks == 1) {
    run_blocks(0, blocks);  // one order of atomic updates: the same numbers every run
  } else {
    const int64_t grain = fibers ? (blocks + kFiberWorkers - 1) / kFiberWorkers : 1;
    at::parallel_for(0, blocks, grain, run_blocks);
  }
}

void* dynamic_shared() { return worker.shared; }

void syncthreads() {
  Worker& w = worker;
  if (w.mode != Mode::fibers) {
    if (w.mode == Mode::plain && blockDim.x * blockDim.y * blockDim.z == 1) return;
    refuse(
        "__syncthreads() reached in a kernel that torchport's CPU runner runs without "
        "barriers (its translator did not see the barrier: called through a pointer or "
        "a macro it cannot follow)");
  }
  Fiber& f = w.fibers[w.current];
#if defined(__x86_64__)
  cudacpu_switch(&f.sp, w.scheduler_sp);
#else
  swapcontext(&f.context, &w.scheduler);
#endif
}

int syncthreads_count(int predicate) {
  Worker& w = worker;
  if (w.mode != Mode::fibers) {
    syncthreads();  // one thread: its own predicate
    return predicate;
  }
  w.count_sum += predicate;
  syncthreads();
  return w.count_result;
}

[[noreturn]] void refuse(const char* message) {
  TORCH_CHECK(false, message);
  std::abort();
}

}  // namespace cudacpu

// How many times each kernel was launched, as JSON: the run's report reads it.
extern "C" __attribute__((visibility("default"))) const char* cudacpu_launch_report() {
  std::lock_guard<std::mutex> lock(cudacpu::launches_mutex);
  std::string out = "{";
  for (const auto& [name, count] : cudacpu::launches) {
    if (out.size() > 1) out += ", ";
    out += "\"" + name + "\": " + std::to_string(count);
  }
  cudacpu::launch_report = out + "}";
  return cudacpu::launch_report.c_str();
}
