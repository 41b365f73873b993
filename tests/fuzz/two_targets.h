#pragma once
// For a fuzzer with two targets: the input's first byte picks one (even: the first, odd: the
// second) and the rest is that target's input, so one corpus and one run cover both.
#include <cstddef>
#include <cstdint>

namespace dtrain::fuzz {

template <class Even, class Odd>
int two_targets(const uint8_t* data, size_t size, Even&& even, Odd&& odd) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0)
    even(data + 1, size - 1);
  else
    odd(data + 1, size - 1);
  return 0;
}

}  // namespace dtrain::fuzz
