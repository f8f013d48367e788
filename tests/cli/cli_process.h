// Test harness for the real binaries of build/bin ($TANDEM_BIN_DIR): run one
// through the shell with its stdout and stderr captured in files, or start
// one with its stdout on a pipe to read line by line as it arrives.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {

struct CliRun {
  int rc = -1;
  std::string out, err;
};

// 'a b' -> "'a b'" for sh.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs BinDir()/PROGRAM ARGS, waits, returns its exit code and output.
inline CliRun RunBinary(const std::filesystem::path& tmp, const std::string& program,
                        const std::vector<std::string>& args) {
  std::string cmd = ShellQuote((BinDir() / program).string());
  for (const std::string& a : args) cmd += " " + ShellQuote(a);
  const std::filesystem::path out = tmp / "cmd.out", err = tmp / "cmd.err";
  cmd += " >" + ShellQuote(out.string()) + " 2>" + ShellQuote(err.string()) + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

// `tandem ARGS | reader`: the command's stdout is a pipe, as for a user who
// pipes it into grep; lines are read as they arrive.
class PipedCommand {
 public:
  PipedCommand(const std::string& program, const std::vector<std::string>& args,
               const std::filesystem::path& stderr_file) {
    std::string cmd = ShellQuote((BinDir() / program).string());
    for (const std::string& a : args) cmd += " " + ShellQuote(a);
    cmd += " 2>" + ShellQuote(stderr_file.string()) + " </dev/null";
    pipe_ = ::popen(cmd.c_str(), "r");
  }
  ~PipedCommand() { Close(); }
  bool ok() const { return pipe_ != nullptr; }
  // The next line (without '\n'), or nullopt at the end.
  std::optional<std::string> ReadLine() {
    std::string line;
    for (int c; (c = std::fgetc(pipe_)) != EOF;) {
      if (c == '\n') return line;
      line += static_cast<char>(c);
    }
    if (line.empty()) return std::nullopt;
    return line;
  }
  // Waits for the command; its exit code.
  int Close() {
    if (!pipe_) return rc_;
    const int status = ::pclose(pipe_);
    pipe_ = nullptr;
    rc_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return rc_;
  }

 private:
  FILE* pipe_ = nullptr;
  int rc_ = -1;
};

}  // namespace tandem::testing
