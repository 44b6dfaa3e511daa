#pragma once
//! An exclusive lock on a directory for one live process: a lock file
//! inside it, held with flock(2) for as long as the DirLock lives. The
//! kernel releases it when the process dies (kill -9 included), so a stale
//! lock never keeps a directory: only a live holder does. The file records
//! who holds it (pid, host, since when), which the refusal quotes.
//!   strata::io::DirLock lock{dir / "run.lock", "BackupAndRestore"};  // or DirectoryInUse
//! flock is advisory and per open file description: a second DirLock on the
//! same file, in this process or another, is refused alike.

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/core/error.hpp>

namespace strata::io {

//! A directory another live process holds (DirLock).
class DirectoryInUse : public Error {
 public:
  using Error::Error;
};

class DirLock {
 public:
  //! Takes `path` (created if missing) or throws DirectoryInUse naming the
  //! holder; `who` starts the messages.
  DirLock(std::filesystem::path path, std::string_view who) : path_(std::move(path)) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::error_code ec;
      created_ = !std::filesystem::exists(path_, ec);
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) throw Error(std::string(who) + ": cannot create the lock file " + path_.string() + ": " + std::strerror(errno));
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        std::string holder = read_holder();
        ::close(fd_);
        fd_ = -1;
        if (err != EWOULDBLOCK)
          throw Error(std::string(who) + ": cannot lock " + path_.string() + ": " + std::strerror(err));
        throw DirectoryInUse(std::string(who) + ": " + path_.parent_path().string() +
                             " is in use by another live run (" + (holder.empty() ? "its lock file names no process" : holder) +
                             "); two runs in one directory would overwrite each other's checkpoints: wait for it "
                             "to end, or give this run another directory");
      }
      // The holder before us may have removed the file between our open and
      // our flock: then we hold a lock on a name that no longer exists.
      struct stat by_fd {}, by_name {};
      if (::fstat(fd_, &by_fd) == 0 && ::stat(path_.c_str(), &by_name) == 0 && by_fd.st_ino == by_name.st_ino &&
          by_fd.st_dev == by_name.st_dev)
        break;
      ::close(fd_);
      fd_ = -1;
    }
    if (fd_ < 0) throw DirectoryInUse(std::string(who) + ": " + path_.string() + " keeps being replaced by another process");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string me = "process " + std::to_string(::getpid()) + " on " + host + ", since " + now() + "\n";
    before_ = read_holder(false);
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] auto n = ::pwrite(fd_, me.data(), me.size(), 0);  // for people: the lock is the flock
    }
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }

  //! Removes the lock file, then releases the lock (a process that opened
  //! the old file meanwhile sees it replaced and tries again).
  void remove_and_release() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());
    ::close(fd_);
    fd_ = -1;
  }
  //! Releases the lock leaving the directory as the lock found it: the file
  //! removed if this lock made it, else its words (the last holder's) put back.
  void release_as_found() {
    if (fd_ < 0) return;
    if (created_) return remove_and_release();
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] auto n = ::pwrite(fd_, before_.data(), before_.size(), 0);
    }
    ::close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  //! Whether this lock made its file (a refused run removes only that).
  [[nodiscard]] bool created() const noexcept { return created_; }

 private:
  //! The lock file's words (`trim`: without trailing newlines).
  std::string read_holder(bool trim = true) const {
    char buf[512] = {};
    const auto n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (trim && !s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
    return s;
  }
  static std::string now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }

  std::filesystem::path path_;
  int fd_ = -1;
  bool created_ = false;
  std::string before_;  // the file's words when this lock took it
};

}  // namespace strata::io
