// Python str semantics on UTF-8 text, for the chat-template interpreter: Python
// strings index, slice, strip and change case by code point, so templates that
// reverse, slice or measure non-ASCII text need code-point aware helpers.
// Case mapping covers Latin-1, Latin Extended-A, Greek and Cyrillic (what chat
// content realistically holds); other scripts pass through unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vi::jinja {

// Decodes UTF-8; invalid bytes decode as U+FFFD so that nothing throws on user text.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
// Number of code points (Python len()).
size_t utf8_length(std::string_view s);

// Python str.isspace() for one code point.
bool py_isspace(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // first upper, rest lower
std::string py_title(std::string_view s);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);

// str.split(sep, maxsplit): sep == nullopt splits on whitespace runs. Throws vi::Error on an
// empty separator, as Python raises ValueError.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code points.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
// str.splitlines() for \n, \r\n and \r.
std::vector<std::string> py_splitlines(std::string_view s);

// Python slice index arithmetic: fills the indices a[start:stop:step] selects.
std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step);

// Python repr() of a str (quotes chosen like CPython).
std::string py_repr_str(std::string_view s);
// HTML escaping as markupsafe does it (& < > ' ").
std::string html_escape(std::string_view s);
// Python repr() of a float (shortest round-trip, 'e' form outside [1e-4, 1e16)).
std::string py_repr_float(double v);

}  // namespace vi::jinja
