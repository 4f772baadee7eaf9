"""Campaigns: a BenchRun template over a matrix (`a2rl.api.benchcampaign`), expanded into runs
(`matrix`) and summarised from their outcomes (`rollup`, with `stats` for the intervals). Pure
functions, shared by the operator and `a2rl campaign run`."""
