"""The OpenEnv-compatible environment server (`agentrl serve`) and its client."""
