"""One module per `gradetrail` subcommand; each has `register(subparsers)`."""
