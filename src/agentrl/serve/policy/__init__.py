"""The OpenAI-compatible policy server that records token ids and log-probs (`agentrl serve-policy`)."""
