// A minimal PNG writer (8-bit RGB, stored deflate blocks: no compression, no dependency) for
// the pictures the benchmarks leave in bench/results.
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pcnn::bench {

class Png {
 public:
  Png(int width, int height) : w_(width), h_(height), rgb_(std::size_t(width) * height * 3, 0) {}
  void set(int x, int y, std::array<std::uint8_t, 3> c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    std::copy(c.begin(), c.end(), rgb_.begin() + (std::size_t(y) * w_ + x) * 3);
  }
  int width() const { return w_; }
  int height() const { return h_; }

  void write(const std::string& path) const {
    std::vector<std::uint8_t> raw;  // each row: filter byte 0, then RGB
    for (int y = 0; y < h_; ++y) {
      raw.push_back(0);
      raw.insert(raw.end(), rgb_.begin() + std::size_t(y) * w_ * 3,
                 rgb_.begin() + std::size_t(y + 1) * w_ * 3);
    }
    std::vector<std::uint8_t> z = {0x78, 0x01};  // zlib header, then stored blocks
    for (std::size_t at = 0; at < raw.size() || at == 0;) {
      const std::size_t len = std::min<std::size_t>(65535, raw.size() - at);
      const bool last = at + len == raw.size();
      z.push_back(last ? 1 : 0);
      z.push_back(len & 0xff);
      z.push_back(len >> 8);
      z.push_back(~len & 0xff);
      z.push_back((~len >> 8) & 0xff);
      z.insert(z.end(), raw.begin() + at, raw.begin() + at + len);
      at += len;
      if (last) break;
    }
    std::uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed data
    for (std::uint8_t v : raw) {
      a = (a + v) % 65521;
      b = (b + a) % 65521;
    }
    put32(z, (b << 16) | a);
    std::vector<std::uint8_t> ihdr;
    put32(ihdr, w_);
    put32(ihdr, h_);
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, no filter, no interlace
    std::ofstream os(path, std::ios::binary);
    if (!os) throw std::runtime_error("cannot write " + path);
    const std::uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    os.write(reinterpret_cast<const char*>(sig), 8);
    chunk(os, "IHDR", ihdr);
    chunk(os, "IDAT", z);
    chunk(os, "IEND", {});
    if (!os) throw std::runtime_error("cannot write " + path);
  }

 private:
  static void put32(std::vector<std::uint8_t>& v, std::uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back((x >> s) & 0xff);
  }
  static std::uint32_t crc(const std::vector<std::uint8_t>& data) {
    std::uint32_t c = 0xffffffffu;
    for (std::uint8_t v : data) {
      c ^= v;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
  }
  static void chunk(std::ofstream& os, const char* type, const std::vector<std::uint8_t>& data) {
    std::vector<std::uint8_t> out;
    put32(out, static_cast<std::uint32_t>(data.size()));
    std::vector<std::uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    out.insert(out.end(), body.begin(), body.end());
    put32(out, crc(body));
    os.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  }
  int w_, h_;
  std::vector<std::uint8_t> rgb_;
};

}  // namespace pcnn::bench
