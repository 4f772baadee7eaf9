"""The local sandbox: the agent in its own namespaces (bubblewrap), reaching only the run's APIs.

Its first process inside is the relay, `a2rl.sandbox_relay` (shared with the eval box).
"""
