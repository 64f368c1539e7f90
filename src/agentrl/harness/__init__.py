"""Black-box agent harnesses run per rollout against the policy server (opencode); see docs/blackbox.md.

`agentrl train --agent opencode` (`RLConfig.from_flat(agent="opencode")`) runs agentrl.harness.backend, which the
trainer's agent registry (agentrl.rl.agent_backends) names by import path; nothing is registered on import.
"""

MIN_CONTEXT_TOKENS = 8192
