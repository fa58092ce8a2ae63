"""gradetrail's tests. A regular package, not a namespace one: a dependency that installs a
top-level `tests` package (ppi-python does) would otherwise shadow this one."""
