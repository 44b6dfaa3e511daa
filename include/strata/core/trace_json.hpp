#pragma once
//! The trace-event JSON of one recorded event (core/trace.hpp), as
//! trace::Session writes it: complete ('X') and instant ('i') events with
//! microsecond timestamps, and the metadata naming processes and threads.
//!   std::string s; strata::trace::json::event(s, e, pid, tid, shift_ns);

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <strata/core/trace.hpp>

namespace strata::trace::json {

//! `s` as a JSON string (quoted, escaped).
inline void quoted(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += b;
    } else {
      out += c;
    }
  }
  out += '"';
}

inline void integer(std::string& out, std::int64_t v) {
  char b[24];
  const auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, r.ptr);
}

//! Nanoseconds as microseconds with three decimals ("12.345").
inline void micros(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  integer(out, ns / 1000);
  const auto frac = static_cast<int>(ns % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

inline void event(std::string& out, const Event& e, int pid, int tid, std::int64_t shift_ns) {
  out += "{\"ph\":\"";
  out += e.phase;
  out += "\",\"name\":";
  quoted(out, e.name ? e.name : "?");
  out += ",\"cat\":\"";
  out += category_name(e.cat);
  out += "\",\"ts\":";
  micros(out, e.begin_ns + shift_ns);
  if (e.phase == 'X') {
    out += ",\"dur\":";
    micros(out, e.end_ns - e.begin_ns);
  } else {
    out += ",\"s\":\"t\"";
  }
  out += ",\"pid\":";
  integer(out, pid);
  out += ",\"tid\":";
  integer(out, tid);
  if (e.nargs > 0) {
    out += ",\"args\":{";
    for (std::uint8_t i = 0; i < e.nargs; ++i) {
      if (i) out += ',';
      quoted(out, e.args[i].key ? e.args[i].key : "?");
      out += ':';
      if (e.args[i].is_text) quoted(out, e.args[i].text ? e.args[i].text : "");
      else integer(out, e.args[i].number);
    }
    out += '}';
  }
  out += '}';
}

//! The metadata naming a process (`tid` < 0) or a thread, then its sort
//! index: `kind` "process" writes process_name and process_sort_index,
//! "thread" thread_name and thread_sort_index.
inline void named(std::string& out, const char* kind, int pid, int tid, std::string_view name, int sort_index) {
  const auto head = [&](const char* what) {
    out += "{\"ph\":\"M\",\"name\":\"";
    out += kind;
    out += what;
    out += "\",\"pid\":";
    integer(out, pid);
    if (tid >= 0) {
      out += ",\"tid\":";
      integer(out, tid);
    }
  };
  head("_name");
  out += ",\"args\":{\"name\":";
  quoted(out, name);
  out += "}},\n";
  head("_sort_index");
  out += ",\"args\":{\"sort_index\":";
  integer(out, sort_index);
  out += "}}";
}

inline void process_name(std::string& out, int pid, std::string_view name) { named(out, "process", pid, -1, name, pid); }

inline void thread_name(std::string& out, int pid, int tid, std::string_view name) {
  named(out, "thread", pid, tid, name, tid);
}

//! An instant on the track saying how many events its full ring lost.
inline void dropped(std::string& out, int pid, int tid, std::uint64_t lost, std::int64_t at_ns) {
  out += "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"trace: ";
  integer(out, static_cast<std::int64_t>(lost));
  out += " events lost (the thread's ring was full between flushes)\",\"cat\":\"other\",\"ts\":";
  micros(out, at_ns);
  out += ",\"pid\":";
  integer(out, pid);
  out += ",\"tid\":";
  integer(out, tid);
  out += ",\"args\":{\"lost\":";
  integer(out, static_cast<std::int64_t>(lost));
  out += "}}";
}

}  // namespace strata::trace::json
