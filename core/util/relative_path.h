#pragma once
// Paths a remote party names relative to one of our folders (a job's output.model, a fetched
// model file) must stay inside that folder.
#include <string>

namespace dtrain::core {

// A relative path to a file that stays inside its folder: not empty, no '/' at the start, no
// '..' part, and not ending in '/' or '.'.
bool stays_inside(const std::string& relative);

}  // namespace dtrain::core
