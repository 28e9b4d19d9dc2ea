#pragma once
// A read-only memory map of a whole file. Checkpoints are mapped, never read:
// a TP rank touches only the pages of its own slices.
#include <cstddef>
#include <filesystem>
#include <span>

namespace neuron {

class MappedFile {
 public:
  // Throws Error{not_found|io}.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;  // [size_] mapped read-only; nullptr for an empty file
  std::size_t size_ = 0;
};

}  // namespace neuron
