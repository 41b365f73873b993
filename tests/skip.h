#pragma once
// A Catch2 test case that cannot run on this machine (no AES-NI, no UDP GSO, a real GPU where the
// case imitates an emulated one) says so and returns: it prints "SKIPPED: <case>: <reason>",
// which tools/test.sh counts as a skip instead of a pass (tools/test_count.sh). Call it before
// the case checks anything; a case that can run half of what it tests is split in two instead.
#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>

#define DTRAIN_SKIP(why)                                                                     \
  do {                                                                                       \
    std::ostringstream dtrain_skip_reason;                                                   \
    dtrain_skip_reason << why;                                                               \
    std::cout << "SKIPPED: " << Catch::getResultCapture().getCurrentTestName() << ": "      \
              << dtrain_skip_reason.str() << std::endl;                                     \
    return;                                                                                  \
  } while (0)
