"""gradetrail's tests. A regular package, so that a `tests` package some dependency installs
into site-packages (ppi-python 0.2.3 ships one) cannot shadow it."""
