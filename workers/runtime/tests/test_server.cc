// A tiny control-protocol server for tests (test_server.h).
#include "test_server.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <istream>
#include <thread>

extern char** environ;

namespace tandem::testing {

namespace asio = boost::asio;
using nlohmann::json;

namespace {
// Runs io until `done` or the timeout; cancels and drains on timeout.
template <typename Cancel>
bool RunFor(asio::io_context& io, const bool& done, milliseconds timeout, Cancel cancel) {
  io.restart();
  io.run_for(timeout);
  if (done) return true;
  cancel();
  io.restart();
  io.run();
  return done;
}
}  // namespace

TestServer::TestServer() : acceptor_(io_), socket_(io_) {
  char tmpl[] = "/tmp/tandem-ctl-XXXXXX";
  dir_ = mkdtemp(tmpl);
  path_ = dir_ + "/control.sock";
  asio::local::stream_protocol::endpoint ep(path_);
  acceptor_.open(ep.protocol());
  acceptor_.bind(ep);
  acceptor_.listen();
}

TestServer::~TestServer() {
  boost::system::error_code ec;
  socket_.close(ec);
  acceptor_.close(ec);
  std::error_code fs_ec;
  std::filesystem::remove_all(dir_, fs_ec);
}

bool TestServer::Accept(milliseconds timeout) {
  bool done = false;
  boost::system::error_code result;
  CloseConnection();
  acceptor_.async_accept(socket_, [&](boost::system::error_code ec) {
    result = ec;
    done = true;
  });
  bool ok = RunFor(io_, done, timeout, [&] { acceptor_.cancel(); });
  eof_ = false;
  buf_.consume(buf_.size());
  return ok && !result;
}

std::optional<std::string> TestServer::ReadLine(milliseconds timeout) {
  bool done = false;
  boost::system::error_code result;
  asio::async_read_until(socket_, buf_, '\n', [&](boost::system::error_code ec, size_t) {
    result = ec;
    done = true;
  });
  bool finished = RunFor(io_, done, timeout, [&] {
    boost::system::error_code ignored;
    socket_.cancel(ignored);
  });
  if (!finished || result) {
    if (result == asio::error::eof || result == asio::error::connection_reset) eof_ = true;
    return std::nullopt;
  }
  std::istream in(&buf_);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<json> TestServer::Read(milliseconds timeout) {
  auto line = ReadLine(timeout);
  if (!line) return std::nullopt;
  json j = json::parse(*line, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

void TestServer::SendLine(const std::string& line) {
  boost::system::error_code ec;
  asio::write(socket_, asio::buffer(line + "\n"), ec);
}

std::optional<json> TestServer::Handshake(milliseconds timeout) {
  if (!Accept(timeout)) return std::nullopt;
  auto hello = Read(timeout);
  if (!hello || hello->value("type", "") != "hello") return std::nullopt;
  Send({{"type", "welcome"}, {"protocol", 1}, {"session", "test"}});
  return hello;
}

std::optional<json> TestServer::Command(const std::string& type, json fields, milliseconds timeout) {
  int64_t id = next_id_++;
  fields["type"] = type;
  fields["id"] = id;
  Send(fields);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto answer = Read(left);
    if (!answer) return std::nullopt;
    if (answer->contains("id") && (*answer)["id"] == id) return answer;
  }
  return std::nullopt;
}

void TestServer::CloseConnection() {
  boost::system::error_code ec;
  socket_.close(ec);
}

pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr, args.data(), envp.data()) != 0) return -1;
  return pid;
}

std::optional<int> WaitFor(pid_t pid, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  if (kill(pid, SIGKILL) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
  }
}

}  // namespace tandem::testing
