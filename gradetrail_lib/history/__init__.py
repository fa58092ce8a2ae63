"""The run history: an entry per completed run (`entries`, the file under the results
root), the Postgres table a team shares (`postgres`), and which of them holds it
(`store`)."""
