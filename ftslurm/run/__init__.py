"""One run: its folder, its replica logs and what they say of each replica's progress.

Why a package: `status`, `failure`, `metrics`, the demo and the benches each want the same few
facts of a running job (attempt, last step and loss, commits, ranks alive) from the same
files, and each read them its own way. Here a run is found once (`Run`: the folder
`logvocab.run_dir` names, its `tft-<job>_<i>.out` logs), a log is read once incrementally
(`cursor.LogCursor`: offset and inode, only the appended bytes, truncation and rotation seen)
and folded once (`progress.ProgressReader`), through `logvocab`'s parsers only.

The package's `__init__` imports nothing, so importing one module of it (the cursor, for a
command that only follows a log) does not load the progress reader and `logtail` with it.
"""
