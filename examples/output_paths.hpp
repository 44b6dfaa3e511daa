// Checks of the examples' output paths (--save FILE, --checkpoint-dir DIR,
// --csv FILE, --tensorboard DIR, --trace FILE) before any data is loaded: a
// path that cannot be written, or two options naming one place, fail now, in
// one sentence with exit status 2, not with an exception after the last epoch.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>
#include <system_error>

namespace example {

//! Ends the program on a command-line mistake: the sentence, then where the
//! options are listed; exit status 2.
[[noreturn]] inline void fail(const char* prog, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n%s: run '%s --help' for the options\n", prog, why.c_str(), prog, prog);
  std::exit(2);
}

namespace detail {

//! Empty when a file can be created in `dir` (tried for real: permission
//! bits say nothing for root, a read-only mount or /proc); else why not.
inline std::string cannot_create_in(const std::filesystem::path& dir) {
  const auto probe = dir / (".strata-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

//! The directory that holds `p` ("." for a bare name).
inline std::filesystem::path parent_of(const std::filesystem::path& p) {
  return p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
}

//! Empty when `dir` is an existing, writable directory; else a clause
//! saying what is wrong with it (as the directory of the named path).
inline std::string bad_parent(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st)) return "its directory " + dir.string() + " does not exist";
  if (!std::filesystem::is_directory(st)) return dir.string() + " is not a directory";
  if (auto why = cannot_create_in(dir); !why.empty())
    return "cannot create files in " + dir.string() + " (" + why + ")";
  return {};
}

}  // namespace detail

//! A file the program will write (e.g. --save): not a directory, not a
//! device or pipe, in an existing directory where files can be created.
inline void check_output_file(const char* prog, const std::string& opt, const std::string& path) {
  namespace fs = std::filesystem;
  const std::string named = opt + " '" + path + "'";
  if (path.empty()) fail(prog, named + " is empty: expected the name of a file to write");
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::is_directory(st)) fail(prog, named + " is a directory, not a file to write");
  if (path.back() == '/') fail(prog, named + " ends in '/': expected the name of a file, not a directory");
  if (fs::exists(st) && !fs::is_regular_file(st))
    fail(prog, named + " exists and is not a regular file (a device, pipe or socket); name a regular file");
  if (auto why = detail::bad_parent(detail::parent_of(path)); !why.empty()) fail(prog, named + ": " + why);
}

//! Whether paths `a` and `b` name the same file (the one written would be
//! overwritten by the other), whether or not it exists yet.
inline bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  const auto bare = [](fs::path p) { return p.has_filename() || !p.has_parent_path() ? p : p.parent_path(); };  // "d/" is d
  std::error_code ec1, ec2, ec3, ec4;  // absolute first: a relative name's own part is never made canonical
  const auto ca = fs::weakly_canonical(fs::absolute(a, ec1), ec2), cb = fs::weakly_canonical(fs::absolute(b, ec3), ec4);
  if (ec1 || ec2 || ec3 || ec4)
    return bare(fs::path(a).lexically_normal()) == bare(fs::path(b).lexically_normal());
  return bare(ca) == bare(cb);
}

//! An output option and its path (nullptr: not given).
struct OutputPath {
  const char* opt;
  const std::string* path;
};
//! The folders an output directory option writes into (--tensorboard: train, validation).
struct OutputSubdirs {
  const char* opt;
  std::initializer_list<const char*> names;
};

//! Every output in its own place: no two of `files` and `dirs` name the
//! same path, none of them names a folder of `subdirs` (DIR/train of
//! --tensorboard DIR), and each such folder is a directory or absent.
inline void check_outputs_apart(const char* prog, std::initializer_list<OutputPath> files,
                                std::initializer_list<OutputPath> dirs, std::initializer_list<OutputSubdirs> subdirs) {
  namespace fs = std::filesystem;
  struct Place {
    std::string what, path;
  };
  std::vector<Place> places;
  for (const auto& list : {files, dirs})
    for (const auto& o : list)
      if (o.path) places.push_back({std::string(o.opt) + " '" + *o.path + "'", *o.path});
  for (const auto& s : subdirs)
    for (const auto& d : dirs)
      if (d.path && std::string(d.opt) == s.opt)
        for (const char* name : s.names) {
          const std::string sub = (fs::path(*d.path) / name).string();
          std::error_code ec;
          const auto st = fs::status(sub, ec);
          if (fs::exists(st) && !fs::is_directory(st))
            fail(prog, std::string(s.opt) + " '" + *d.path + "': " + sub + " exists and is not a directory (" +
                           s.opt + " writes its " + name + " files into it): remove it or name another directory");
          places.push_back({std::string(s.opt) + "'s folder " + sub, sub});
        }
  for (std::size_t i = 0; i < places.size(); ++i)
    for (std::size_t j = i + 1; j < places.size(); ++j)
      if (same_file(places[i].path, places[j].path))
        fail(prog, places[i].what + " and " + places[j].what + " name the same place: give each its own");
}

//! A directory the program will write into (e.g. --checkpoint-dir): it may
//! not exist yet (it is created), but its parent must; it is not a file.
inline void check_output_dir(const char* prog, const std::string& opt, const std::string& path) {
  namespace fs = std::filesystem;
  const std::string named = opt + " '" + path + "'";
  if (path.empty()) fail(prog, named + " is empty: expected a directory");
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_directory(st)) fail(prog, named + " exists and is not a directory");
  if (fs::is_directory(st)) {
    if (auto why = detail::cannot_create_in(path); !why.empty())
      fail(prog, named + ": cannot create files in it (" + why + ")");
    return;
  }
  fs::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/" names dir
  if (auto why = detail::bad_parent(detail::parent_of(p)); !why.empty()) fail(prog, named + ": " + why);
}

}  // namespace example
