#include "cli/staging.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <mutex>

#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace loom {
namespace {

// A fixed table the handler can read without allocating: a slot is in use while its
// first byte is not 0. A command stages one or two paths at a time.
constexpr size_t kSlots = 8;
constexpr size_t kPathMax = 4096;
std::array<std::array<char, kPathMax>, kSlots> g_staged{};
std::mutex g_mutex;

/// Removes `name` under `dir_fd` and everything below it with system calls only (no
/// allocation, no locks): safe in a signal handler.
void remove_tree(int dir_fd, const char* name, int depth) {
  if (unlinkat(dir_fd, name, 0) == 0 || depth > 16) return;
  const int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(dirent64) char buf[8192];
  // Entries removed while reading can shift the listing: read it again until it is empty.
  for (int pass = 0; pass < 64; ++pass) {
    lseek(fd, 0, SEEK_SET);
    bool any = false;
    for (;;) {
      const long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const dirent64*>(buf + off);
        off += d->d_reclen;
        if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
        any = true;
        remove_tree(fd, d->d_name, depth + 1);
      }
    }
    if (!any) break;
  }
  close(fd);
  unlinkat(dir_fd, name, AT_REMOVEDIR);
}

extern "C" void on_interrupt(int sig) {
  bool removed = false;
  for (const auto& slot : g_staged) {
    if (slot[0] == '\0') continue;
    remove_tree(AT_FDCWD, slot.data(), 0);
    removed = true;
  }
  const char plain[] = "loom: interrupted\n";
  const char staged[] = "loom: interrupted; removed the unfinished output\n";
  const ssize_t ignored = removed ? write(STDERR_FILENO, staged, sizeof staged - 1)
                                  : write(STDERR_FILENO, plain, sizeof plain - 1);
  (void)ignored;
  _exit(128 + sig);
}

}  // namespace

void install_interrupt_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGINT);
    sigaddset(&action.sa_mask, SIGTERM);
    for (const int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      if (old.sa_handler == SIG_IGN) continue;  // nohup / background shells: keep ignoring
      sigaction(sig, &action, nullptr);
    }
  });
}

namespace {

/// Runs `f` with SIGINT / SIGTERM blocked, so the handler never sees a half-written slot.
template <class F>
void with_signals_blocked(F f) {
  const BlockInterrupts block;
  std::lock_guard lock(g_mutex);
  f();
}

}  // namespace

BlockInterrupts::BlockInterrupts() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}

BlockInterrupts::~BlockInterrupts() {
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void register_staging(const fs::path& path) {
  install_interrupt_handler();
  const std::string text = fs::absolute(path).string();
  if (text.size() >= kPathMax) throw InputError(text + ": path too long");
  with_signals_blocked([&] {
    for (auto& slot : g_staged) {
      if (slot[0] != '\0') continue;
      std::memcpy(slot.data(), text.c_str(), text.size() + 1);
      return;
    }
  });
}

void unregister_staging(const fs::path& path) {
  const std::string text = fs::absolute(path).string();
  with_signals_blocked([&] {
    for (auto& slot : g_staged) {
      if (text == slot.data()) slot[0] = '\0';
    }
  });
}

fs::path staging_path(const fs::path& destination) {
  return destination.parent_path() /
         ("." + destination.filename().string() + ".tmp-" + std::to_string(::getpid()));
}

StagedFile::StagedFile(const std::string& out, const std::string& default_name) {
  fs::path dest = fs::absolute(out).lexically_normal();
  if (out.ends_with('/') || fs::is_directory(dest)) dest = dest / default_name;
  if (dest.filename().empty()) dest = dest.parent_path() / default_name;
  destination_ = dest;
  if (fs::is_directory(destination_))
    throw InputError("--out " + out + ": " + destination_.string() + " is a folder");
  std::error_code ec;
  fs::create_directories(destination_.parent_path(), ec);
  if (ec || !fs::is_directory(destination_.parent_path())) {
    throw InputError("--out " + out + ": cannot create the folder " +
                     destination_.parent_path().string() +
                     (ec ? ": " + ec.message() : std::string(": a file is in the way")));
  }
  staging_ = staging_path(destination_);
  register_staging(staging_);
}

StagedFile::~StagedFile() {
  if (committed_) return;
  std::error_code ec;
  fs::remove(staging_, ec);
  unregister_staging(staging_);
}

void StagedFile::commit() {
  std::error_code ec;
  fs::rename(staging_, destination_, ec);
  if (ec) {
    throw std::runtime_error("--out " + destination_.string() +
                             ": cannot publish the file: " + ec.message());
  }
  unregister_staging(staging_);
  committed_ = true;
}

}  // namespace loom
