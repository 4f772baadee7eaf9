"""The LLM agent stacks on this machine: installed on first use (`install.ensure_stack`)."""

from a2rl_runner.stacks.install import InstalledStack, StackInstallError, agents_dir, ensure_stack

__all__ = ["InstalledStack", "StackInstallError", "agents_dir", "ensure_stack"]
