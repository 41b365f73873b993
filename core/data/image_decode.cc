#include "core/data/image_decode.h"

#include <png.h>
#include <setjmp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

namespace dtrain::core {
namespace {

bool is_png(const std::vector<uint8_t>& b) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), kSignature, 8) == 0;
}

bool is_jpeg(const std::vector<uint8_t>& b) {
  return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

// What a header's size allows, judged before any pixel buffer exists. Without exceptions, so
// that the JPEG reader, which must not throw past libjpeg, asks it too.
enum class SizeVerdict { kFine, kNotExpected, kTooLarge };

SizeVerdict judge_size(uint64_t width, uint64_t height, ImageSize expect) {
  if (expect.width > 0 && (width != uint64_t(expect.width) || height != uint64_t(expect.height)))
    return SizeVerdict::kNotExpected;
  if (width == 0 || height == 0 || width > uint64_t(kMaxImagePixels) ||
      width * height > uint64_t(kMaxImagePixels))
    return SizeVerdict::kTooLarge;
  return SizeVerdict::kFine;
}

std::string too_large(uint64_t width, uint64_t height) {
  return "a " + std::to_string(width) + "x" + std::to_string(height) +
         " image (at most 2^26 pixels)";
}

void check_size(uint64_t width, uint64_t height, ImageSize expect) {
  switch (judge_size(width, height, expect)) {
    case SizeVerdict::kNotExpected: throw ImageSizeMismatch(int64_t(width), int64_t(height));
    case SizeVerdict::kTooLarge: throw ImageError(too_large(width, height));
    case SizeVerdict::kFine: return;
  }
}

Image decode_png(const std::vector<uint8_t>& bytes, int channels, ImageSize expect) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    throw ImageError(std::string("not a readable PNG: ") + png.message);
  try {
    check_size(png.width, png.height, expect);
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  png.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image img{png.width, png.height, channels, {}};
  img.pixels.resize(size_t(img.width) * size_t(img.height) * size_t(channels));
  // Composited over black when the image has alpha (background null).
  if (!png_image_finish_read(&png, nullptr, img.pixels.data(), 0, nullptr)) {
    const std::string why = png.message;
    png_image_free(&png);
    throw ImageError("a damaged PNG: " + why);
  }
  return img;
}

// libjpeg reports errors through a callback that must not return: it jumps back here.
struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr info) {
  auto* e = reinterpret_cast<JpegErrors*>(info->err);
  (*info->err->format_message)(info, e->message);
  longjmp(e->jump, 1);
}

void jpeg_silent(j_common_ptr, int) {}  // warnings (a truncated file shows as one) ignored

// The classic libjpeg pattern, with no C++ object living in this frame (longjmp skips no
// destructor, and the pixels live behind `img`). False with `message` set on failure.
constexpr size_t kMessageBytes = JMSG_LENGTH_MAX + 64;

// When the image is refused for its size, `size` is the header's (and `message` unset).
bool read_jpeg(const std::vector<uint8_t>& bytes, int channels, ImageSize expect, Image* img,
               bool* for_size, ImageSize* size, char* message) {
  jpeg_decompress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  errors.mgr.emit_message = jpeg_silent;
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    std::snprintf(message, kMessageBytes, "a damaged JPEG: %s", errors.message);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  const uint64_t w = info.image_width, h = info.image_height;
  const SizeVerdict verdict = judge_size(w, h, expect);
  if (verdict != SizeVerdict::kFine) {  // before any pixel buffer
    jpeg_destroy_decompress(&info);
    *for_size = true;
    size->width = int64_t(w), size->height = int64_t(h);
    return false;
  }
  jpeg_start_decompress(&info);
  img->width = info.output_width;
  img->height = info.output_height;
  img->channels = channels;
  img->pixels.resize(size_t(img->width) * size_t(img->height) * size_t(channels));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = img->pixels.data() + size_t(info.output_scanline) * size_t(img->width) * channels;
    jpeg_read_scanlines(&info, &row, 1);
  }
  const bool truncated = errors.mgr.num_warnings > 0;
  if (!truncated) jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  if (truncated) std::snprintf(message, kMessageBytes, "a truncated or damaged JPEG");
  return !truncated;
}

Image decode_jpeg(const std::vector<uint8_t>& bytes, int channels, ImageSize expect) {
  Image img;
  ImageSize size;
  bool for_size = false;
  char message[kMessageBytes] = {0};
  if (!read_jpeg(bytes, channels, expect, &img, &for_size, &size, message)) {
    if (for_size) check_size(uint64_t(size.width), uint64_t(size.height), expect);  // throws
    throw ImageError(message);
  }
  return img;
}

}  // namespace

Image decode_image(const std::vector<uint8_t>& bytes, int channels, ImageSize expect) {
  if (channels != 1 && channels != 3)
    throw ImageError("images decode to 1 or 3 channels, not " + std::to_string(channels));
  if (is_png(bytes)) return decode_png(bytes, channels, expect);
  if (is_jpeg(bytes)) return decode_jpeg(bytes, channels, expect);
  throw ImageError("neither a PNG nor a JPEG (its first bytes are not either signature)");
}

std::vector<uint8_t> encode_png(const Image& image) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_get_memory_size(png, size, 0, image.pixels.data(), 0, nullptr))
    throw ImageError(std::string("cannot encode a PNG: ") + png.message);
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr))
    throw ImageError(std::string("cannot encode a PNG: ") + png.message);
  out.resize(size);
  return out;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  jpeg_compress_struct info;
  JpegErrors errors;
  info.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  if (setjmp(errors.jump)) {
    jpeg_destroy_compress(&info);
    std::free(buffer);
    throw ImageError(std::string("cannot encode a JPEG: ") + errors.message);
  }
  jpeg_create_compress(&info);
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(image.width);
  info.image_height = static_cast<JDIMENSION>(image.height);
  info.input_components = static_cast<int>(image.channels);
  info.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) +
                   size_t(info.next_scanline) * size_t(image.width) * size_t(image.channels);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

}  // namespace dtrain::core
