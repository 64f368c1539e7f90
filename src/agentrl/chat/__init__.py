"""Chat: chat templates, token-in/token-out encoding, tool-call parsing."""
