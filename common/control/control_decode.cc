// Control protocol messages, version 1: the decoders of what workers send
// (control_messages.h; schemas/control.schema.json). Every field is checked
// against its schema type before it is read, so no nlohmann::json accessor
// here can throw; errors name the field ("hello.rank: expected an integer").
#include <limits>

#include "common/control/control_messages.h"

namespace tandem::control {

using nlohmann::json;

namespace {

// A JSON integer >= 0 (parsed lines hold those as unsigned, built ones may not).
bool IsCount(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }
uint64_t Count(const json& v) { return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>()); }

// Typed reads of one object's optional fields: absent leaves `out` as it is;
// present with another type is an error naming `where.key`.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}
  const json* Find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  std::string Name(const char* key) const { return where_ + "." + key; }
  Status String(const char* key, std::string& out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return InvalidArgument(Name(key) + ": expected a string");
    out = v->get<std::string>();
    return Status::Ok();
  }
  Status Int(const char* key, int& out, int min) const {
    std::optional<int64_t> x;
    TANDEM_RETURN_IF_ERROR(Int64(key, x));
    if (!x) return Status::Ok();
    if (*x < min || *x > std::numeric_limits<int>::max()) return InvalidArgument(Name(key) + ": out of range");
    out = static_cast<int>(*x);
    return Status::Ok();
  }
  Status Int64(const char* key, std::optional<int64_t>& out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      return InvalidArgument(Name(key) + ": expected an integer");
    out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Bytes(const char* key, uint64_t& out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!IsCount(*v)) return InvalidArgument(Name(key) + ": expected a non-negative integer");
    out = Count(*v);
    return Status::Ok();
  }
  Status Bool(const char* key, bool& out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return InvalidArgument(Name(key) + ": expected true or false");
    out = v->get<bool>();
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string where_;
};

}  // namespace

StatusOr<Residency> DecodeResidency(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": expected an object");
  Residency r;
  Fields f(j, where);
  if (const json* tags = f.Find("tags")) {
    if (!tags->is_object()) return InvalidArgument(f.Name("tags") + ": expected an object of byte counts");
    for (const auto& [name, bytes] : tags->items()) {
      if (!IsCount(bytes)) return InvalidArgument(f.Name("tags") + "." + name + ": expected a non-negative integer");
      r.tags[name] = Count(bytes);
    }
  }
  const json* device = f.Find("device");
  r.has_device = device != nullptr;
  if (device) {
    if (!device->is_object()) return InvalidArgument(f.Name("device") + ": expected an object");
    Fields d(*device, f.Name("device"));
    TANDEM_RETURN_IF_ERROR(d.Int("index", r.device.index, 0));
    TANDEM_RETURN_IF_ERROR(d.Bytes("used", r.device.used));
    TANDEM_RETURN_IF_ERROR(d.Bytes("total", r.device.total));
    r.device.source.clear();
    TANDEM_RETURN_IF_ERROR(d.String("source", r.device.source));
  }
  return r;
}

StatusOr<Hello> DecodeHello(const json& body) {
  if (!body.is_object()) return InvalidArgument("hello: expected an object");
  Hello h;
  Fields f(body, "hello");
  if (!f.Find("role")) return InvalidArgument("hello.role: missing");
  if (!f.Find("rank")) return InvalidArgument("hello.rank: missing");
  TANDEM_RETURN_IF_ERROR(f.String("job_id", h.job_id));
  TANDEM_RETURN_IF_ERROR(f.String("task_id", h.task_id));
  TANDEM_RETURN_IF_ERROR(f.String("role", h.role));
  TANDEM_RETURN_IF_ERROR(f.Int("rank", h.rank, 0));
  TANDEM_RETURN_IF_ERROR(f.Int("world_size", h.world_size, 0));
  TANDEM_RETURN_IF_ERROR(f.Int("pid", h.pid, 0));
  TANDEM_RETURN_IF_ERROR(f.String("token", h.token));
  if (const json* devices = f.Find("devices")) {
    if (!devices->is_array()) return InvalidArgument("hello.devices: expected an array of integers");
    for (const json& d : *devices) {
      if (!IsCount(d) || Count(d) > static_cast<uint64_t>(std::numeric_limits<int>::max()))
        return InvalidArgument("hello.devices: expected an array of non-negative integers");
      h.devices.push_back(static_cast<int>(Count(d)));
    }
  }
  if (const json* caps = f.Find("capabilities")) {
    if (!caps->is_array()) return InvalidArgument("hello.capabilities: expected an array of strings");
    for (const json& c : *caps) {
      if (!c.is_string()) return InvalidArgument("hello.capabilities: expected an array of strings");
      h.capabilities.push_back(c.get<std::string>());
    }
  }
  if (const json* tags = f.Find("tags")) {
    if (!tags->is_array()) return InvalidArgument("hello.tags: expected an array of {name, bytes, backup}");
    for (const json& t : *tags) {
      if (!t.is_object()) return InvalidArgument("hello.tags: expected an array of {name, bytes, backup}");
      TagInfo info;
      Fields tf(t, "hello.tags[]");
      if (!tf.Find("name")) return InvalidArgument("hello.tags[].name: missing");
      TANDEM_RETURN_IF_ERROR(tf.String("name", info.name));
      TANDEM_RETURN_IF_ERROR(tf.Bytes("bytes", info.bytes));
      TANDEM_RETURN_IF_ERROR(tf.Bool("backup", info.backup));
      h.tags.push_back(std::move(info));
    }
  }
  if (const json* r = f.Find("residency")) {
    TANDEM_ASSIGN_OR_RETURN(h.residency, DecodeResidency(*r, "hello.residency"));
  }
  return h;
}

StatusOr<Answer> DecodeAnswer(const ParsedObject& line) {
  Answer a;
  a.error = line.type == "error";
  if (!a.error && line.type != "ack") return InvalidArgument(line.type + ": not an ack or an error");
  a.id = line.id;
  Fields f(line.body, line.type);
  if (const json* id = f.Find("id"); id && !id->is_null() && !line.id)
    return InvalidArgument(line.type + ".id: expected an integer or null");
  TANDEM_RETURN_IF_ERROR(f.String("command", a.command));
  TANDEM_RETURN_IF_ERROR(f.String("code", a.code));
  TANDEM_RETURN_IF_ERROR(f.String("message", a.message));
  if (const json* r = f.Find("residency")) {
    TANDEM_ASSIGN_OR_RETURN(a.residency, DecodeResidency(*r, line.type + ".residency"));
  }
  if (const json* d = f.Find("detail"); d && d->is_object() && d->contains("source")) {
    const json& s = (*d)["source"];
    const std::string where = line.type + ".detail.source";
    if (!s.is_string()) return InvalidArgument(where + ": expected a string");
    a.source = s.get<std::string>();
    if (a.source.empty() || a.source.size() > kMaxSourceBytes)
      return InvalidArgument(where + ": expected 1 to " + std::to_string(kMaxSourceBytes) + " bytes");
    for (const char ch : a.source)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return InvalidArgument(where + ": a control byte");
    bool known = false;
    for (const char* scheme : {"shm:", "ipc:", "file:", "nccl:"}) known = known || a.source.rfind(scheme, 0) == 0;
    if (!known) return InvalidArgument(where + ": expected shm:, ipc:, file: or nccl:, got \"" + a.source.substr(0, 64) + "\"");
  }
  if (a.error && a.code.empty()) a.code = "error";
  return a;
}

StatusOr<PhaseRequest> DecodePhaseRequest(const ParsedObject& line) {
  PhaseRequest p;
  if (!line.id) return InvalidArgument("request_phase needs an integer id");
  p.id = *line.id;
  Fields f(line.body, "request_phase");
  if (!f.Find("phase")) return InvalidArgument("request_phase.phase: missing");
  TANDEM_RETURN_IF_ERROR(f.String("phase", p.phase));
  TANDEM_RETURN_IF_ERROR(f.Int64("version", p.version));
  return p;
}

StatusOr<Metrics> DecodeMetrics(const ParsedObject& line) {
  Metrics m;
  Fields f(line.body, "metrics");
  if (const json* v = f.Find("values")) {
    if (!v->is_object()) return InvalidArgument("metrics.values: expected an object");
    m.values = *v;
  }
  TANDEM_RETURN_IF_ERROR(f.Int64("step", m.step));
  return m;
}

}  // namespace tandem::control
