#pragma once
// SHA-256 (FIPS 180-4), incremental: the hub client hashes a file while it
// downloads it (and the part already on disk when it resumes one).
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace neuron {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const std::uint8_t> data);
  void update(std::string_view data) {
    update(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(data.data()), data.size()));
  }
  // The digest as 64 lowercase hex digits. Ends the hash: call it once.
  std::string hex_digest();

 private:
  void compress(const std::uint8_t* block);  // block: [64] bytes
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};  // the tail of the input that does not fill a block yet
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

}  // namespace neuron
