"""Analysis of runs: statistics, summaries, comparison, sample sizes, cost, retrieval."""
