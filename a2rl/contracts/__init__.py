"""The contracts between a2rl's processes, defined once for both modes: the environment each
process gets (`env`) and the set-up container's command line (`setup`)."""
