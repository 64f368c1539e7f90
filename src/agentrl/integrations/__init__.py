"""Adapters that put agentrl environments inside other trainers (TRL environment_factory)."""
