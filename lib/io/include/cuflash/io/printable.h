// Text read from a user's file, quoted in an error message: one line on the terminal whatever
// the file holds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cuflash::io {

// `text` with bytes outside printable ASCII written as \xNN (a binary file shows as such, without
// raw bytes or line breaks), cut after `max_shown` bytes with "..." appended.
std::string printable(std::string_view text, size_t max_shown);

// `text` (a message that may name a user's file) with control characters escaped: \n, \t, \r
// and \xNN for the others, so that it stays one line and no escape sequence reaches the
// terminal; other bytes, UTF-8 names included, as they are.
std::string on_one_line(std::string_view text);

}  // namespace cuflash::io
