#include "loom/core/log.h"

#include <cstdio>
#include <fstream>
#include <mutex>

namespace loom::log {
namespace {
std::mutex g_mutex;
Level g_level = Level::info;
int g_rank = 0;
int g_world = 1;
std::ofstream g_file;
std::string g_file_path;
std::string g_file_error;
}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }
void set_rank(int rank, int world_size) { g_rank = rank; g_world = world_size; }

void set_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_file.is_open()) g_file.close();
  g_file_path = path;
  g_file_error.clear();
  if (!path.empty()) {
    g_file.open(path, std::ios::app);
    LOOM_CHECK(g_file.good(), IOError, "cannot open log file '", path,
               "' for writing: check that its directory exists and is writable");
  }
}

void write(Level level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* tag = level == Level::debug ? "DEBUG" : level == Level::info ? "INFO"
                    : level == Level::warn ? "WARNING" : "ERROR";
  std::string prefix = g_world > 1 ? "[rank " + std::to_string(g_rank) + "] " : "";
  std::string line = prefix + (level == Level::info ? "" : std::string(tag) + ": ") + message;
  if (level >= Level::warn) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  } else if (g_rank == 0) {
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  }
  if (g_rank == 0 && g_file.is_open()) {
    g_file << line << '\n';
    g_file.flush();
    if (!g_file.good()) {
      g_file_error = "cannot write the log file '" + g_file_path + "' (the disk may be full or the file removed): "
                     "its lines from here on are lost";
      std::fprintf(stderr, "%sERROR: %s\n", prefix.c_str(), g_file_error.c_str());
      std::fflush(stderr);
      g_file.close();
    }
  }
}

std::string file_error() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_file_error;
}

}  // namespace loom::log
