// Implements redis_conn.h on hiredis 0.14's blocking API.
#include "backends/redis/redis_conn.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdlib>
#include <fstream>

namespace tandem::backends::redis {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

RedisReply Copy(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::kString; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::kStatus; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::kError; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::kInteger; out.integer = r->integer; break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Copy(r->element[i]));
      break;
    default: out.type = RedisReply::Type::kNil; break;
  }
  return out;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

StatusOr<RedisConfig> RedisConfig::FromUrl(const std::string& url, const std::string& password_file) {
  RedisConfig c;
  std::string rest = url;
  const std::string scheme = "redis://";
  if (rest.rfind(scheme, 0) != 0) return InvalidArgument("redis url: expected redis://[user@]host[:port], got '" + url + "'");
  rest = rest.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (auto at = rest.find('@'); at != std::string::npos) {
    c.user = rest.substr(0, at);
    if (c.user.find(':') != std::string::npos)
      return InvalidArgument("redis url: put the password in a file (--redis-password-file), not in the url");
    rest = rest.substr(at + 1);
  }
  if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    std::string port = rest.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535) return InvalidArgument("redis url: bad port '" + port + "'");
    c.port = static_cast<int>(p);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return InvalidArgument("redis url: missing host in '" + url + "'");
  c.host = rest;
  if (c.user.empty()) c.user = EnvOr("TANDEM_REDIS_USER", "");
  c.password_file = password_file.empty() ? EnvOr("TANDEM_REDIS_PASSWORD_FILE", "") : password_file;
  return c;
}

std::string RedisConfig::Describe() const {
  return (user.empty() ? "" : user + "@") + host + ":" + std::to_string(port);
}

StatusOr<std::string> ReadPasswordFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read redis password file " + path);
  std::string line;
  std::getline(in, line);
  auto b = line.find_first_not_of(" \t\r\n");
  auto e = line.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return InvalidArgument("redis password file " + path + " is empty");
  return line.substr(b, e - b + 1);
}

StatusOr<std::unique_ptr<RedisConn>> RedisConn::Connect(const RedisConfig& config) {
  std::string password;
  if (!config.password_file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(password, ReadPasswordFile(config.password_file), "redis auth");
  }
  redisContext* c = redisConnectWithTimeout(config.host.c_str(), config.port, ToTimeval(config.timeout));
  if (c == nullptr) return Unavailable("redis " + config.Describe() + ": out of memory");
  if (c->err) {
    std::string err = c->errstr;
    redisFree(c);
    return Unavailable("redis " + config.Describe() + ": " + err);
  }
  redisSetTimeout(c, ToTimeval(config.timeout));
  std::unique_ptr<RedisConn> conn(new RedisConn(c));
  if (!password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!config.user.empty()) auth.push_back(config.user);
    auth.push_back(password);
    auto r = conn->Command(auth);
    if (!r.ok()) {
      if (conn->broken()) return r.status().WithContext("redis " + config.Describe());
      return PermissionDenied("redis " + config.Describe() + ": AUTH refused: " + r.status().message());
    }
  }
  return conn;
}

RedisConn::~RedisConn() {
  if (c_) redisFree(c_);
}

void RedisConn::SetTimeout(std::chrono::milliseconds timeout) { redisSetTimeout(c_, ToTimeval(timeout)); }

StatusOr<RedisReply> RedisConn::Command(const std::vector<std::string>& args) {
  if (broken_) return Unavailable("redis connection is broken");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (raw == nullptr) {
    broken_ = true;
    return Unavailable(std::string("redis ") + (args.empty() ? "" : args[0]) + ": " + c_->errstr);
  }
  auto* reply = static_cast<redisReply*>(raw);
  RedisReply out = Copy(reply);
  freeReplyObject(reply);
  if (out.type == RedisReply::Type::kError)
    return FailedPrecondition("redis " + (args.empty() ? "" : args[0]) + ": " + out.str);
  return out;
}

std::string StreamEntry::Field(const std::string& name) const {
  for (const auto& [k, v] : fields)
    if (k == name) return v;
  return "";
}

std::vector<StreamEntry> ParseStreamReply(const RedisReply& reply) {
  std::vector<StreamEntry> out;
  if (!reply.is_array()) return out;
  for (const auto& stream : reply.elements) {
    if (!stream.is_array() || stream.elements.size() != 2 || !stream.elements[1].is_array()) continue;
    for (const auto& entry : stream.elements[1].elements) {
      if (!entry.is_array() || entry.elements.size() != 2) continue;
      StreamEntry e;
      e.id = entry.elements[0].str;
      const auto& kv = entry.elements[1].elements;  // nil for a deleted pending entry
      for (size_t i = 0; i + 1 < kv.size(); i += 2) e.fields.emplace_back(kv[i].str, kv[i + 1].str);
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace tandem::backends::redis
