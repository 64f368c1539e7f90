"""Servers over agentrl's envs and policies (see the modules; nothing is imported here)."""
