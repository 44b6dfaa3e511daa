#pragma once
//! The stage that reads several files, one after the other: the source that
//! auto-sharding by file splits between workers.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/data/detail/node.hpp>

namespace strata::data::detail {

template <DatasetElement E>
class FilesNode final : public Node<E> {
 public:
  //! `read(path)` opens the pipeline of one file's elements.
  using Reader = std::function<NodePtr<E>(const std::filesystem::path&)>;

  FilesNode(std::vector<std::filesystem::path> files, Reader read) : files_(std::move(files)), read_(std::move(read)) {}

  StreamPtr<E> open() const override { return std::make_unique<Files>(files_, read_); }
  Cardinality cardinality() const override {
    return files_.empty() ? Cardinality::finite(0) : Cardinality::unknown();
  }
  NodePtr<E> shard_files(std::size_t num, std::size_t index) const override {
    if (files_.size() < num)
      throw Error("auto-sharding by file: " + std::to_string(files_.size()) + " input file(s) for " +
                  std::to_string(num) + " workers; give every worker at least one file, or build the dataset "
                  "from tensors to shard by data");
    std::vector<std::filesystem::path> mine;
    for (std::size_t i = index; i < files_.size(); i += num) mine.push_back(files_[i]);
    return std::make_shared<const FilesNode>(std::move(mine), read_);
  }
  [[nodiscard]] const std::vector<std::filesystem::path>& files() const noexcept { return files_; }

 private:
  class Files final : public Stream<E> {
   public:
    Files(std::vector<std::filesystem::path> files, Reader read) : files_(std::move(files)), read_(std::move(read)) {}
    std::optional<E> next() override {
      for (;;) {
        if (cur_)
          if (auto e = cur_->next()) return e;
        if (i_ == files_.size()) return std::nullopt;
        auto node = read_(files_[i_++]);
        if (!node) throw Error("from_files: the reader returned no dataset for " + files_[i_ - 1].string());
        cur_ = node->open();
      }
    }

   private:
    std::vector<std::filesystem::path> files_;  // copies: a pass may outlive its dataset
    Reader read_;
    std::size_t i_ = 0;
    StreamPtr<E> cur_;
  };

  std::vector<std::filesystem::path> files_;
  Reader read_;
};

}  // namespace strata::data::detail
