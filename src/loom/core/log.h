// Logging: info goes to stdout from rank 0 only; warnings and errors go to stderr from every rank
// (a warning on rank 3 must not be swallowed). An optional log file receives rank 0's lines too.
#pragma once

#include <string>

#include "loom/core/error.h"

namespace loom::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void set_level(Level level);
Level level();
// Rank used to prefix messages and decide who prints info lines (set by dist init).
void set_rank(int rank, int world_size);
// Also append rank-0 output to this file ("" closes it).
void set_file(const std::string& path);
// "" while the log file takes every line; else what failed (a full disk, an I/O error): said once
// on stderr when it happens, then the file is closed. Long runs check it after each step and stop,
// so a log cut short never goes unnoticed.
std::string file_error();

void write(Level level, const std::string& message);

template <typename... Args>
void debug(const Args&... args) { if (level() <= Level::debug) write(Level::debug, detail::concat(args...)); }
template <typename... Args>
void info(const Args&... args) { if (level() <= Level::info) write(Level::info, detail::concat(args...)); }
template <typename... Args>
void warn(const Args&... args) { write(Level::warn, detail::concat(args...)); }
template <typename... Args>
void error(const Args&... args) { write(Level::error, detail::concat(args...)); }

}  // namespace loom::log
