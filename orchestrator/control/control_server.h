// The daemon's end of the control protocol's transport (docs/control-
// protocol.md; schemas/control.schema.json; docs/control-protocol.md): a unix
// socket (0600) that workers reach through TANDEM_CONTROL and, when asked
// (ListenTcp, `tandemd --control-listen`), a TCP listener for workers on
// other nodes; newline-delimited JSON lines of at most 1 MiB, and the
// handshake's framing rules. Both transports share one connection type
// (a generic stream socket): same framing, limits and timeouts. Admission
// (tokens, control_token.h) is the delegate's: it sees each connection's
// transport.
//
// Lines are decoded with the protocol's one codec (common/control/).
//
// What it guarantees to its delegate:
//  - OnHello gets the first line of a connection when it is a `hello` of
//    protocol version 1 whose every field has its schema type (DecodeHello);
//    the delegate answers with the welcome's extra fields, or an error (sent
//    as error{code} and the connection closed). A first line that is not a
//    hello, a hello of another version or with a mistyped field, or no line
//    within the handshake timeout: an error line is sent and the connection
//    closed; the delegate never hears of it.
//  - OnMessage gets every later line that is a JSON object with a string
//    `type`, at most kMaxDepth deep. Lines that are not JSON, not objects,
//    have no type, are nested deeper or are longer than the limit are
//    answered with error{code: malformed | line_too_long} here, and never
//    reach the delegate. An exception escaping a delegate is caught here,
//    logged and answered as error{code: internal}: nothing a worker sends can
//    crash the daemon.
//  - OnClosed runs once for a connection that had been welcomed, when it
//    closes for any reason (worker exit, Close(), a write error).
// Everything runs on the io thread; Send never blocks (lines are queued).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "common/control/control_codec.h"
#include "common/control/control_messages.h"
#include "common/status.h"

namespace tandem::control {

class ControlServer;

enum class Transport { kUnix, kTcp };

// "HOST:PORT" (HOST numeric, "[v6]" or "localhost") -> an endpoint.
StatusOr<boost::asio::ip::tcp::endpoint> ParseHostPort(const std::string& host_port);
// An endpoint as "HOST:PORT" ("[v6]:PORT" for IPv6).
std::string HostPort(const boost::asio::ip::tcp::endpoint& ep);

class ControlConnection : public std::enable_shared_from_this<ControlConnection> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  ControlConnection(Socket socket, ControlServer& server, uint64_t id, Transport transport);
  uint64_t id() const { return id_; }
  Transport transport() const { return transport_; }
  // "unix" or the TCP peer's "HOST:PORT", for logs.
  const std::string& peer() const { return peer_; }
  bool closed() const { return closed_; }
  bool welcomed() const { return welcomed_; }
  // Queues one line (a newline is added). No-op once closed.
  void Send(const nlohmann::json& line);
  // Sends what is queued, then closes (OnClosed follows).
  void Close();
  // The peer's pid from SO_PEERCRED (0 if unknown, and always over TCP).
  int peer_pid() const { return peer_pid_; }

 private:
  friend class ControlServer;
  void Start();
  void ReadMore();
  void OnLine(std::string_view line);
  void OnHandshake(const ParsedObject& hello);
  void Refuse(std::string_view code, std::string_view message);
  void WriteNext();
  void Shutdown();

  Socket socket_;
  ControlServer& server_;
  uint64_t id_;
  Transport transport_;
  std::string peer_;
  boost::asio::steady_timer handshake_timer_;
  std::string in_;
  bool discarding_ = false;  // inside an over-long line
  std::deque<std::string> out_;
  bool writing_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool welcomed_ = false;
  int peer_pid_ = 0;
  char buf_[64 * 1024];
};

class ControlServer {
 public:
  using ConnectionPtr = std::shared_ptr<ControlConnection>;
  struct Delegate {
    virtual ~Delegate() = default;
    // The welcome's fields besides type/protocol, or an error to refuse with
    // (kPermissionDenied is sent as code "unauthenticated").
    virtual StatusOr<nlohmann::json> OnHello(const ConnectionPtr& c, const Hello& hello) = 0;
    virtual void OnMessage(const ConnectionPtr& c, const ParsedObject& message) = 0;
    virtual void OnClosed(const ConnectionPtr& c) = 0;
  };
  struct Options {
    size_t max_line_bytes = 1 << 20;
    std::chrono::milliseconds handshake_timeout{10'000};
  };

  // Binds `path` (replacing a stale socket file), mode 0600, and accepts.
  static StatusOr<std::unique_ptr<ControlServer>> Listen(boost::asio::io_context& io,
                                                         const std::filesystem::path& path, Delegate& delegate,
                                                         Options options);
  static StatusOr<std::unique_ptr<ControlServer>> Listen(boost::asio::io_context& io,
                                                         const std::filesystem::path& path, Delegate& delegate) {
    return Listen(io, path, delegate, Options{});
  }
  ~ControlServer();
  // Also accepts TCP connections on `host_port` ("HOST:PORT"; port 0 picks a
  // free one, see tcp_address()). Same delegate, framing and limits.
  Status ListenTcp(const std::string& host_port);
  // Stops accepting and closes every connection (without OnClosed calls).
  void Close();
  const std::filesystem::path& path() const { return path_; }
  // The bound TCP address "HOST:PORT" ("" without ListenTcp).
  std::string tcp_address() const;

 private:
  friend class ControlConnection;
  ControlServer(boost::asio::io_context& io, std::filesystem::path path, Delegate& delegate, Options options);
  template <typename Acceptor>
  void Accept(Acceptor& acceptor, Transport transport);
  void Adopt(ControlConnection::Socket socket, Transport transport);

  boost::asio::io_context& io_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tcp_acceptor_;
  std::filesystem::path path_;
  Delegate& delegate_;
  Options options_;
  uint64_t next_id_ = 1;
  bool closed_ = false;
  std::map<uint64_t, std::weak_ptr<ControlConnection>> connections_;
};

}  // namespace tandem::control
