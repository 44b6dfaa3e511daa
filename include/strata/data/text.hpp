#pragma once
//! Character-level text for language models: a UTF-8 file read and
//! checked, its characters (Unicode code points) numbered by a vocabulary,
//! and cut into windows of `context` characters whose labels are the
//! characters that follow (next-character prediction).
//!   auto text = strata::data::load_text("fortunes.txt");         // Error: missing, empty, not UTF-8
//!   strata::data::CharVocab vocab(text);                           // the distinct characters, sorted
//!   auto ids = vocab.encode(text);
//!   auto [x, y] = strata::data::char_windows(ids, 128);            // [n, 128] each, ids as floats
//!   auto ds = strata::data::from_tensor_slices(x, y).shuffle(1024, seed).batch(64);

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

//! The code points of UTF-8 `bytes`; an Error naming the byte offset of the
//! first invalid sequence (`what` names the source).
inline std::vector<char32_t> decode_utf8(const std::string& bytes, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    std::size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either
    ok = ok && !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (!ok)
      throw Error(what + " is not UTF-8 text: an invalid byte sequence at byte " + std::to_string(i) +
                  " (a text corpus must be UTF-8)");
    out.push_back(cp);
    i += len;
  }
  return out;
}

//! Code point `cp` as UTF-8.
inline std::string encode_utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

//! The code points of the UTF-8 file at `path`: an Error when it is
//! missing, unreadable, empty or not UTF-8.
inline std::vector<char32_t> load_text(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error("text corpus " + path.string() + " does not exist (scripts/fetch-corpus.sh fetches the default one)");
  if (std::filesystem::is_directory(path, ec)) throw Error("text corpus " + path.string() + " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("text corpus " + path.string() + " cannot be read");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("text corpus " + path.string() + ": a read failed");
  if (bytes.empty()) throw Error("text corpus " + path.string() + " is empty");
  return decode_utf8(bytes, "text corpus " + path.string());
}

//! The characters of a text, numbered 0..size()-1 in code point order.
class CharVocab {
 public:
  CharVocab() = default;
  explicit CharVocab(const std::vector<char32_t>& text) : chars_(text) {
    std::sort(chars_.begin(), chars_.end());
    chars_.erase(std::unique(chars_.begin(), chars_.end()), chars_.end());
  }
  [[nodiscard]] std::size_t size() const noexcept { return chars_.size(); }
  //! The id of `c`; an Error if the vocabulary lacks it.
  [[nodiscard]] std::size_t id(char32_t c) const {
    const auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
    if (it == chars_.end() || *it != c)
      throw Error("the character U+" + hex(c) + " is not in the vocabulary of " + std::to_string(size()) + " characters");
    return static_cast<std::size_t>(it - chars_.begin());
  }
  [[nodiscard]] char32_t at(std::size_t id) const {
    if (id >= chars_.size())
      throw Error("character id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(size()));
    return chars_[id];
  }
  [[nodiscard]] std::vector<std::uint32_t> encode(const std::vector<char32_t>& text) const {
    std::vector<std::uint32_t> ids;
    ids.reserve(text.size());
    for (char32_t c : text) ids.push_back(static_cast<std::uint32_t>(id(c)));
    return ids;
  }
  [[nodiscard]] std::string decode(const std::vector<std::uint32_t>& ids) const {
    std::string s;
    for (auto i : ids) s += encode_utf8(at(i));
    return s;
  }

 private:
  static std::string hex(char32_t c) {
    char b[16];
    std::snprintf(b, sizeof b, "%04X", static_cast<unsigned>(c));
    return b;
  }
  std::vector<char32_t> chars_;
};

//! Windows of `context` ids from `ids`, one every `stride` (default: no
//! overlap), and their labels: the ids one further on. Both [n, context],
//! ids as floats (exact below 2^24). An Error when `ids` is shorter than
//! context + 1 (no window and its next character fit).
inline std::pair<Tensor<float>, Tensor<float>> char_windows(const std::vector<std::uint32_t>& ids,
                                                            std::size_t context, std::size_t stride = 0) {
  if (context == 0) throw Error("char_windows: the context must be at least 1 character");
  if (stride == 0) stride = context;
  if (ids.size() < context + 1)
    throw Error("the text has " + std::to_string(ids.size()) + " characters, fewer than the context of " +
                std::to_string(context) + " plus the one after it: give a longer text or a shorter context");
  const std::size_t n = (ids.size() - context - 1) / stride + 1;
  Tensor<float> x{Shape{n, context}}, y{Shape{n, context}};
  for (std::size_t w = 0; w < n; ++w)
    for (std::size_t t = 0; t < context; ++t) {
      x[w * context + t] = static_cast<float>(ids[w * stride + t]);
      y[w * context + t] = static_cast<float>(ids[w * stride + t + 1]);
    }
  return {std::move(x), std::move(y)};
}

}  // namespace strata::data
