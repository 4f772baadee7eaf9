"""Managing the runs of a store (`a2rl runs …`): summaries (`summary`), the rule that says whether
a run is still going (`state`), the run's files on this machine (`local_files`), deletion
(`delete`), side-by-side comparison (`compare`) and export/import as a tar (`archive`)."""
