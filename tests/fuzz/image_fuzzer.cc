// libFuzzer target for the image decoders (core/data/image_decode.h): any bytes, decoded to gray
// and to RGB. They must be refused with an ImageError and nothing else: any other exception,
// crash, sanitizer report, or an allocation beyond libFuzzer's memory limit fails the run.
#include <cstdint>
#include <vector>

#include "core/data/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  for (int channels : {1, 3}) {
    try {
      const dtrain::core::Image img = dtrain::core::decode_image(bytes, channels);
      if (img.pixels.size() != size_t(img.width * img.height * channels)) __builtin_trap();
    } catch (const dtrain::core::ImageError&) {
    }
    try {
      dtrain::core::decode_image(bytes, channels, {4, 4});  // the size a model asks for
    } catch (const dtrain::core::ImageError&) {  // ImageSizeMismatch included
    }
  }
  return 0;
}
