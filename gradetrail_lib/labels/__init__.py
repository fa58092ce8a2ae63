"""Human labels: a person's pass/fail verdict on one response of a run, kept outside the
run directories: the labels file and looking labels up (`store`), and the files a person
edits, CSV or JSON Lines (`files`)."""
