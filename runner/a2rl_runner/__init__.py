"""Local mode: `a2rl run` runs a BenchRun on this machine (agent subprocess, recorder, eval, report)."""
