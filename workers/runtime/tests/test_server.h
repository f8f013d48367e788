// A tiny control-protocol server for tests: the daemon's side of
// schemas/control.schema.json on a unix socket, on Boost.Asio with a timeout
// on every wait, plus helpers to run real worker processes (the probe, the
// Python example) and stop them by pid.
#pragma once

#include <utility>  // before asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::testing {

using std::chrono::milliseconds;

class TestServer {
 public:
  // Listens on a fresh socket in a fresh temporary directory.
  TestServer();
  ~TestServer();
  std::string endpoint() const { return "unix:" + path_; }
  const std::string& path() const { return path_; }

  bool Accept(milliseconds timeout = milliseconds(10'000));
  // One line without its newline; nullopt on timeout or EOF (eof() tells).
  std::optional<std::string> ReadLine(milliseconds timeout = milliseconds(10'000));
  // A line parsed as JSON (nullopt on timeout/EOF/garbage).
  std::optional<nlohmann::json> Read(milliseconds timeout = milliseconds(10'000));
  bool eof() const { return eof_; }
  void SendLine(const std::string& line);
  void Send(const nlohmann::json& j) { SendLine(j.dump()); }
  // Reads hello, answers welcome; returns the hello.
  std::optional<nlohmann::json> Handshake(milliseconds timeout = milliseconds(10'000));
  // Sends {"type":type,"id":next id, ...fields} and returns the answer with that id.
  std::optional<nlohmann::json> Command(const std::string& type, nlohmann::json fields = nlohmann::json::object(),
                                        milliseconds timeout = milliseconds(30'000));
  void CloseConnection();

 private:
  boost::asio::io_context io_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::local::stream_protocol::socket socket_;
  boost::asio::streambuf buf_;
  std::string dir_, path_;
  bool eof_ = false;
  int64_t next_id_ = 1;
};

// Starts argv[0] with extra environment variables; returns the pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
// Waits up to `timeout` for pid; returns its wait status, or nullopt.
std::optional<int> WaitFor(pid_t pid, milliseconds timeout);
// SIGKILLs pid (if still running) and reaps it.
void KillAndReap(pid_t pid);

}  // namespace tandem::testing
