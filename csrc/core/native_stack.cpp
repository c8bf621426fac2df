// Native stacks for allocation history (torch.cuda's stacks="all"): taken with the platform's
// unwinder when recorded (return addresses only), named when a snapshot reads them.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mpsrt/allocator.h"

#if defined(__has_include)
#if __has_include(<execinfo.h>) && __has_include(<dlfcn.h>) && __has_include(<cxxabi.h>)
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#define MPSRT_HAVE_NATIVE_STACKS 1
#endif
#endif

#if defined(MPSRT_HAVE_NATIVE_STACKS) && defined(__linux__)
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define MPSRT_HAVE_ELF_SYMBOLS 1
#endif

namespace mpsrt {

#if defined(MPSRT_HAVE_NATIVE_STACKS)

namespace {

constexpr int kMaxNativeFrames = 128;

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) return name;
  std::string s(out);
  std::free(out);  // NOLINT: __cxa_demangle's buffer is malloc'd
  return s;
}

#if defined(MPSRT_HAVE_ELF_SYMBOLS)
// The function symbols of one ELF file (.symtab, which a stripped file lacks, else .dynsym),
// sorted by address; the names stay in the file's read-only mapping.
class ElfSymbols {
 public:
  explicit ElfSymbols(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Elf64_Ehdr))) {
      len_ = static_cast<size_t>(st.st_size);
      map_ = mmap(nullptr, len_, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    close(fd);
    if (map_ == MAP_FAILED) return;
    load();
  }
  ~ElfSymbols() {
    if (map_ != MAP_FAILED) munmap(map_, len_);
  }
  ElfSymbols(const ElfSymbols&) = delete;
  ElfSymbols& operator=(const ElfSymbols&) = delete;

  /// The mangled name of the function that holds `vaddr` (an address of the file's own
  /// layout), or nullptr.
  const char* lookup(uint64_t vaddr) const {
    auto it = std::upper_bound(syms_.begin(), syms_.end(), vaddr,
                               [](uint64_t a, const Sym& s) { return a < s.start; });
    if (it == syms_.begin()) return nullptr;
    --it;
    if (it->size != 0 && vaddr >= it->start + it->size) return nullptr;
    return strtab_ + it->name;
  }

 private:
  struct Sym {
    uint64_t start;
    uint64_t size;
    uint64_t name;  // offset in strtab_
  };

  const char* at(uint64_t off) const { return static_cast<const char*>(map_) + off; }
  bool fits(uint64_t off, uint64_t n) const { return off <= len_ && n <= len_ - off; }

  // The file's .symtab, else its .dynsym, with a string table in bounds; or nullptr.
  const Elf64_Shdr* symbol_table() const {
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(map_);
    if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !fits(eh->e_shoff, uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
      return nullptr;
    }
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(at(eh->e_shoff));
    for (Elf64_Word want : {Elf64_Word(SHT_SYMTAB), Elf64_Word(SHT_DYNSYM)}) {
      for (unsigned i = 0; i < eh->e_shnum; ++i) {
        const Elf64_Shdr& t = sh[i];
        if (t.sh_type != want || t.sh_link >= eh->e_shnum || t.sh_entsize != sizeof(Elf64_Sym) ||
            !fits(t.sh_offset, t.sh_size) ||
            !fits(sh[t.sh_link].sh_offset, sh[t.sh_link].sh_size)) {
          continue;
        }
        return &t;
      }
    }
    return nullptr;
  }

  // The defined functions of the symbol table, sorted by address.
  void load() {
    const Elf64_Shdr* table = symbol_table();
    if (table == nullptr) return;
    const auto* sh =
        reinterpret_cast<const Elf64_Shdr*>(at(reinterpret_cast<const Elf64_Ehdr*>(map_)->e_shoff));
    const Elf64_Shdr& strs = sh[table->sh_link];
    strtab_ = at(strs.sh_offset);
    const auto* sym = reinterpret_cast<const Elf64_Sym*>(at(table->sh_offset));
    const size_t n = table->sh_size / sizeof(Elf64_Sym);
    for (size_t i = 0; i < n; ++i) {
      const unsigned type = ELF64_ST_TYPE(sym[i].st_info);
      const bool func = type == STT_FUNC || type == STT_GNU_IFUNC;
      if (func && sym[i].st_shndx != SHN_UNDEF && sym[i].st_value != 0 &&
          sym[i].st_name < strs.sh_size) {
        syms_.push_back({sym[i].st_value, sym[i].st_size, sym[i].st_name});
      }
    }
    std::sort(syms_.begin(), syms_.end(),
              [](const Sym& x, const Sym& y) { return x.start < y.start; });
  }

  void* map_ = MAP_FAILED;
  size_t len_ = 0;
  const char* strtab_ = nullptr;
  std::vector<Sym> syms_;
};

std::string executable_path() {
  char buf[PATH_MAX + 1];
  const ssize_t n = readlink("/proc/self/exe", buf, PATH_MAX);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("??");
}
#endif  // MPSRT_HAVE_ELF_SYMBOLS

// Names of native frames, process-wide: each pc and each file is looked at once.
class Symbolizer {
 public:
  StackFrame get(uintptr_t pc) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = frames_.find(pc);
    if (it != frames_.end()) return it->second;
    StackFrame f = resolve(pc);
    frames_.emplace(pc, f);
    return f;
  }

 private:
  StackFrame resolve(uintptr_t pc) {
    StackFrame f;
    f.pc = pc;
    f.filename = "??";
    f.name = "??";
    Dl_info info{};
#if defined(MPSRT_HAVE_ELF_SYMBOLS)
    link_map* lm = nullptr;
    if (dladdr1(reinterpret_cast<void*>(pc), &info, reinterpret_cast<void**>(&lm),
                RTLD_DL_LINKMAP) == 0 ||
        lm == nullptr) {
      f.name = "<unwind unsupported>";
      return f;
    }
    const uintptr_t bias = lm->l_addr;  // the file's addresses + bias = the process's
    f.filename = (lm->l_name != nullptr && lm->l_name[0] != '\0') ? lm->l_name : exe_path();
    const char* sym = symbols(f.filename).lookup(pc - bias - 1);  // pc-1: inside the call
    if (sym == nullptr) sym = info.dli_sname;
#else
    if (dladdr(reinterpret_cast<void*>(pc), &info) == 0) {
      f.name = "<unwind unsupported>";
      return f;
    }
    const uintptr_t bias = reinterpret_cast<uintptr_t>(info.dli_fbase);
    if (info.dli_fname != nullptr) f.filename = info.dli_fname;
    const char* sym = info.dli_sname;
#endif
    if (sym != nullptr && sym[0] != '\0') f.name = demangle(sym);
    f.line = static_cast<int>(std::min<uintptr_t>(pc - bias - 1, INT_MAX));
    return f;
  }

#if defined(MPSRT_HAVE_ELF_SYMBOLS)
  const ElfSymbols& symbols(const std::string& path) {
    auto& slot = files_[path];
    if (!slot) slot = std::make_unique<ElfSymbols>(path);
    return *slot;
  }
  const std::string& exe_path() {
    if (exe_.empty()) exe_ = executable_path();
    return exe_;
  }
  std::unordered_map<std::string, std::unique_ptr<ElfSymbols>> files_;
  std::string exe_;
#endif
  std::mutex mu_;
  std::unordered_map<uintptr_t, StackFrame> frames_;
};

Symbolizer& symbolizer() {
  static auto* s = new Symbolizer();  // never destroyed: snapshots may run at exit
  return *s;
}

}  // namespace

__attribute__((noinline)) StackFrames native_stack(size_t skip) {
  void* pcs[kMaxNativeFrames];
  const int n = backtrace(pcs, kMaxNativeFrames);
  StackFrames out;
  // The caller's frame is the one whose pc is this call's return address: pcs[1] normally
  // (pcs[0] is native_stack itself), later where backtrace() is intercepted (ASan adds its
  // interceptor's frame).
  const auto caller = reinterpret_cast<void*>(__builtin_return_address(0));
  size_t first = 1;
  for (int i = 0; i < n; ++i) {
    if (pcs[i] == caller) {
      first = static_cast<size_t>(i);
      break;
    }
  }
  first += skip;
  if (n <= 0 || static_cast<size_t>(n) <= first) return out;
  out.resize(static_cast<size_t>(n) - first);
  for (size_t i = first; i < static_cast<size_t>(n); ++i) {
    out[i - first].pc = reinterpret_cast<uintptr_t>(pcs[i]);
  }
  return out;
}

StackFrame symbolize_native_frame(uintptr_t pc) {
  return symbolizer().get(pc);
}

#else  // no unwinder on this platform

StackFrames native_stack(size_t) {
  return {};
}

StackFrame symbolize_native_frame(uintptr_t pc) {
  StackFrame f;
  f.pc = pc;
  f.filename = "??";
  f.name = "<unwind unsupported>";
  return f;
}

#endif

}  // namespace mpsrt
