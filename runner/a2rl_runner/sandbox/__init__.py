"""The local sandbox: the agent in its own namespaces (bubblewrap), reaching only the run's APIs.

Kept free of heavy imports: `relay` runs inside the sandbox as its first process.
"""
