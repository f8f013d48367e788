// Sessions and their exact tokens (session_store.h).
#include "workers/agents/session_store.h"

namespace tandem::agents {

SessionStore::SessionStore(SessionLimits limits) : limits_(limits) {}

size_t SessionStore::AddedTokens(const Session& s, const Turn& t) const {
  size_t prompt_new = t.prompt_ids.size();
  if (t.parent >= 0 && static_cast<size_t>(t.parent) < s.turns.size()) {
    const size_t inherited = FullLength(s.turns[static_cast<size_t>(t.parent)]);
    prompt_new = prompt_new > inherited ? prompt_new - inherited : 0;
  }
  return prompt_new + t.output_ids.size();
}

StatusOr<uint64_t> SessionStore::Open(const std::string& id, size_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  const size_t held = it == sessions_.end() ? 0 : it->second.tokens;
  if (held + tokens > limits_.max_tokens)
    return InvalidArgument("session_id: session " + id + " holds " + std::to_string(held) + " tokens; " +
                           std::to_string(tokens) + " more would exceed its limit of " +
                           std::to_string(limits_.max_tokens));
  if (it == sessions_.end()) {
    if (sessions_.size() >= limits_.max_sessions)
      return ResourceExhausted("session " + id + ": " + std::to_string(limits_.max_sessions) +
                               " sessions are open (the limit); close finished ones");
    it = sessions_.emplace(id, Session{}).first;
    it->second.serial = next_serial_++;
  }
  if (it->second.turns.size() >= limits_.max_turns)
    return InvalidArgument("session_id: session " + id + " holds " + std::to_string(it->second.turns.size()) +
                           " turns (the limit)");
  return it->second.serial;
}

Parent SessionStore::FindParent(const std::string& id, const Conversation& asked, int32_t turn_end) const {
  std::lock_guard<std::mutex> lock(mu_);
  Parent best;
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return best;
  const std::vector<Turn>& turns = it->second.turns;
  size_t best_len = 0;
  // The latest turn wins a tie.
  for (size_t i = turns.size(); i-- > 0;) {
    const Turn& t = turns[i];
    if (!t.asked || t.asked->tools_key != asked.tools_key || t.asked->enable_thinking != asked.enable_thinking) continue;
    const std::vector<Message>& had = t.asked->messages;
    const size_t k = had.size();
    if (asked.messages.size() < k) continue;
    bool same = true;
    for (size_t m = 0; m < k && same; ++m) same = SameRendering(had[m], asked.messages[m]);
    if (!same) continue;
    if (asked.messages.size() == k) {
      // The same question again: a sibling of t.
      if (best.kind == Parent::Kind::kNone) {
        best.kind = Parent::Kind::kSamePrompt;
        best.turn = t.parent;
        best.ids = t.prompt_ids;
      }
      continue;
    }
    if (!SameRendering(asked.messages[k], t.reply) || k + 1 <= best_len) continue;
    best_len = k + 1;
    best.kind = Parent::Kind::kContinues;
    best.turn = static_cast<int64_t>(i);
    best.next_message = k + 1;
    best.ids = t.prompt_ids;
    best.ids.insert(best.ids.end(), t.output_ids.begin(), t.output_ids.end());
    best.ended_on_turn_end = !t.output_ids.empty() && t.output_ids.back() == turn_end;
  }
  if (best.kind != Parent::Kind::kNone) best.serial = it->second.serial;
  return best;
}

std::vector<int64_t> SessionStore::Record(const std::string& id, uint64_t serial, std::vector<Turn> turns) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  const auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.serial != serial) return ids;
  Session& s = it->second;
  for (Turn& t : turns) {
    const size_t added = AddedTokens(s, t);
    if (s.tokens + added > limits_.max_tokens || s.turns.size() >= limits_.max_turns) {
      ++s.dropped;
      ids.push_back(-1);
      continue;
    }
    s.tokens += added;
    ids.push_back(static_cast<int64_t>(s.turns.size()));
    s.turns.push_back(std::move(t));
  }
  return ids;
}

StatusOr<SessionExport> SessionStore::Export(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotFound("session " + id + ": no such session");
  const Session& s = it->second;
  SessionExport out;
  out.session_id = id;
  out.dropped_turns = s.dropped;
  out.tokens = s.tokens;
  out.turns.reserve(s.turns.size());
  // Parents come before children, so each record extends its parent's.
  for (size_t i = 0; i < s.turns.size(); ++i) {
    const Turn& t = s.turns[i];
    TokenRecord r;
    r.turn = static_cast<int64_t>(i);
    r.parent = t.parent;
    r.chat = t.asked != nullptr;
    r.finish_reason = t.finish_reason;
    r.weight_version = t.weight_version;
    r.prompt_tokens = t.prompt_ids.size();
    r.ids = t.prompt_ids;
    r.ids.insert(r.ids.end(), t.output_ids.begin(), t.output_ids.end());
    size_t inherited = 0;
    if (t.parent >= 0 && static_cast<size_t>(t.parent) < i) {
      const TokenRecord& p = out.turns[static_cast<size_t>(t.parent)];
      inherited = std::min(p.ids.size(), t.prompt_ids.size());
      r.mask.assign(p.mask.begin(), p.mask.begin() + static_cast<std::ptrdiff_t>(inherited));
      r.logprobs.assign(p.logprobs.begin(), p.logprobs.begin() + static_cast<std::ptrdiff_t>(inherited));
      r.weight_versions.assign(p.weight_versions.begin(),
                               p.weight_versions.begin() + static_cast<std::ptrdiff_t>(inherited));
    }
    r.mask.resize(t.prompt_ids.size(), 0);
    r.logprobs.resize(t.prompt_ids.size(), 0.0f);
    r.weight_versions.resize(t.prompt_ids.size(), -1);
    for (size_t k = 0; k < t.output_ids.size(); ++k) {
      r.mask.push_back(1);
      r.logprobs.push_back(k < t.output_logprobs.size() ? t.output_logprobs[k] : 0.0f);
      r.weight_versions.push_back(t.weight_version);
    }
    out.turns.push_back(std::move(r));
  }
  return out;
}

Status SessionStore::Close(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sessions_.erase(id) == 0) return NotFound("session " + id + ": no such session");
  return Status::Ok();
}

size_t SessionStore::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

nlohmann::json ExportJson(const SessionExport& e) {
  nlohmann::json turns = nlohmann::json::array();
  for (const TokenRecord& r : e.turns) {
    turns.push_back({{"turn", r.turn},
                     {"parent", r.parent < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.parent)},
                     {"kind", r.chat ? "chat" : "completion"},
                     {"ids", r.ids},
                     {"mask", r.mask},
                     {"logprobs", r.logprobs},
                     {"weight_versions", r.weight_versions},
                     {"prompt_tokens", r.prompt_tokens},
                     {"completion_tokens", r.ids.size() - r.prompt_tokens},
                     {"finish_reason", r.finish_reason},
                     {"weight_version", r.weight_version}});
  }
  return {{"session_id", e.session_id}, {"tokens", e.tokens}, {"dropped_turns", e.dropped_turns}, {"turns", turns}};
}

}  // namespace tandem::agents
