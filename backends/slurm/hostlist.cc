// Hostlist expansion and node placement: see hostlist.h.
#include "backends/slurm/hostlist.h"

#include <charconv>

namespace tandem::backends::slurm {
namespace {

// Splits on commas that are not inside brackets.
StatusOr<std::vector<std::string_view>> SplitTop(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      if (++depth > 1) return InvalidArgument("hostlist: nested '[' at offset " + std::to_string(i));
    } else if (s[i] == ']') {
      if (--depth < 0) return InvalidArgument("hostlist: unbalanced ']' at offset " + std::to_string(i));
    } else if (s[i] == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return InvalidArgument("hostlist: unclosed '[' in \"" + std::string(s) + "\"");
  parts.push_back(s.substr(start));
  return parts;
}

StatusOr<long> ParseNumber(std::string_view s, std::string_view what) {
  long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0)
    return InvalidArgument(std::string(what) + ": \"" + std::string(s) + "\" is not a number");
  return v;
}

// "01-04,07" -> {"01","02","03","04","07"} (padding of each lower bound kept).
StatusOr<std::vector<std::string>> ExpandRanges(std::string_view body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                               : comma - start);
    if (item.empty()) return InvalidArgument("hostlist: empty range in [" + std::string(body) + "]");
    size_t dash = item.find('-');
    std::string_view lo_s = item.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
    TANDEM_ASSIGN_OR_RETURN(long lo, ParseNumber(lo_s, "hostlist range"), "hostlist");
    TANDEM_ASSIGN_OR_RETURN(long hi, ParseNumber(hi_s, "hostlist range"), "hostlist");
    if (hi < lo) return InvalidArgument("hostlist: reversed range " + std::string(item));
    if (hi - lo > 100000) return InvalidArgument("hostlist: range too large " + std::string(item));
    for (long v = lo; v <= hi; ++v) {
      std::string n = std::to_string(v);
      if (n.size() < lo_s.size()) n.insert(0, lo_s.size() - n.size(), '0');
      out.push_back(std::move(n));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Status ExpandOne(std::string_view name, std::vector<std::string>& out) {
  size_t open = name.find('[');
  if (open == std::string_view::npos) {
    if (name.find(']') != std::string_view::npos)
      return InvalidArgument("hostlist: unbalanced ']' in " + std::string(name));
    out.emplace_back(name);
    return Status::Ok();
  }
  size_t close = name.find(']', open);
  if (close == std::string_view::npos) return InvalidArgument("hostlist: unclosed '[' in " + std::string(name));
  TANDEM_ASSIGN_OR_RETURN(auto values, ExpandRanges(name.substr(open + 1, close - open - 1)),
                          "in " + std::string(name));
  std::string prefix(name.substr(0, open));
  std::string_view rest = name.substr(close + 1);
  for (const auto& v : values) {
    std::vector<std::string> tails;
    TANDEM_RETURN_IF_ERROR(ExpandOne(rest, tails), "hostlist");
    for (const auto& t : tails) out.push_back(prefix + v + t);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr) {
  std::vector<std::string> out;
  if (expr.empty()) return out;
  TANDEM_ASSIGN_OR_RETURN(auto parts, SplitTop(expr), "expand hostlist");
  for (auto p : parts) {
    if (p.empty()) return InvalidArgument("hostlist: empty name in \"" + std::string(expr) + "\"");
    TANDEM_RETURN_IF_ERROR(ExpandOne(p, out), "expand hostlist");
  }
  return out;
}

StatusOr<std::vector<int>> ParseIndexList(std::string_view s) {
  if (s.substr(0, 4) == "IDX:") s.remove_prefix(4);
  std::vector<int> out;
  if (s.empty() || s == "N/A") return out;
  TANDEM_ASSIGN_OR_RETURN(auto items, ExpandRanges(s), "gpu index list");
  for (const auto& i : items) out.push_back(std::stoi(i));
  return out;
}

StatusOr<std::vector<NodeSlot>> PlaceOnNodes(const std::vector<std::string>& nodes,
                                             int gpus_per_node, int replicas,
                                             int gpus_per_replica) {
  if (nodes.empty()) return InvalidArgument("place: no nodes");
  if (replicas < 0 || gpus_per_replica < 0 || gpus_per_node < 0)
    return InvalidArgument("place: negative count");
  std::vector<NodeSlot> out;
  if (gpus_per_replica == 0) {
    for (int r = 0; r < replicas; ++r) out.push_back({nodes[static_cast<size_t>(r) % nodes.size()], {}});
    return out;
  }
  if (gpus_per_replica > gpus_per_node)
    return ResourceExhausted("place: a replica needs " + std::to_string(gpus_per_replica) +
                             " GPUs, a node has " + std::to_string(gpus_per_node));
  const int per_node = gpus_per_node / gpus_per_replica;
  if (static_cast<long>(per_node) * static_cast<long>(nodes.size()) < replicas)
    return ResourceExhausted("place: " + std::to_string(replicas) + " replicas of " +
                             std::to_string(gpus_per_replica) + " GPUs do not fit on " +
                             std::to_string(nodes.size()) + " nodes of " +
                             std::to_string(gpus_per_node) + " GPUs");
  for (int r = 0; r < replicas; ++r) {
    NodeSlot s;
    s.node = nodes[static_cast<size_t>(r / per_node)];
    int base = (r % per_node) * gpus_per_replica;
    for (int g = 0; g < gpus_per_replica; ++g) s.gpus.push_back(base + g);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem::backends::slurm
