// Messages compared as rendered (agent_message.h).
#include "workers/agents/agent_message.h"

namespace tandem::agents {

bool SameRendering(const Message& a, const Message& b) {
  if (a.role != b.role || a.content.value_or("") != b.content.value_or("") ||
      a.reasoning_content != b.reasoning_content || a.tool_calls.size() != b.tool_calls.size())
    return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].name != b.tool_calls[i].name || a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return true;
}

}  // namespace tandem::agents
