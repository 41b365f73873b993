#pragma once
// PNG (libpng) and JPEG (libjpeg-turbo) decoding into 8-bit pixels, for image-folder data
// (image_folder.h). A file is untrusted input: its size is bounded before anything is
// allocated for its pixels, and every decoder error becomes an ImageError with the reason.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::core {

class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An image that decodes fine but not to the size asked for (decode_image's `expect`).
class ImageSizeMismatch : public ImageError {
 public:
  ImageSizeMismatch(int64_t width, int64_t height)
      : ImageError("a " + std::to_string(width) + "x" + std::to_string(height) + " image"),
        width(width), height(height) {}
  int64_t width, height;
};

struct Image {
  int64_t width = 0, height = 0, channels = 0;  // channels: 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;                  // row-major, channels interleaved (HWC)
};

// The most pixels one decoded image may have (a 8192x8192 photo); larger ones are refused
// before they are decoded.
constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

// The size an image must have; 0 x 0: any (up to kMaxImagePixels).
struct ImageSize {
  int64_t width = 0, height = 0;
};

// Decodes `bytes` (PNG or JPEG, told apart by their signature) into `channels` (1 or 3)
// channels: colour is converted to gray by luminance, gray replicated to RGB, alpha dropped.
// An image of another size than `expect` is refused from its header, before its pixels are
// allocated (ImageSizeMismatch).
Image decode_image(const std::vector<uint8_t>& bytes, int channels, ImageSize expect = {});

// The encoders, for tests and tools that make image folders (quality: JPEG 1..100).
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality);

}  // namespace dtrain::core
