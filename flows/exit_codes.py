"""The exit statuses of the `flywheel` command, one meaning each, for wrappers such as cron.

    0    success (`status`: the run completed, or is running)
    1    a data gate failed during `run`/`resume` (the gate report is printed)
    2    a user error: bad config or option, unknown run id, an unusable data root, catalog or
         model folder; nothing was written
    3    locked: another live process runs this run id, or holds the catalog
    4    a stage failed mid-run (one line names the stage, the cause and the log file with the
         traceback); `flywheel resume RUN_ID` continues once the cause is fixed
    5    `flywheel validate` found a failed check in the stored outputs (a gate, a missing or
         damaged file); nothing was changed
    124  `flywheel audit` stopped a query that ran past `--timeout` (as timeout(1) exits)
    130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM; `flywheel resume RUN_ID` continues
    141  the reader of the output went away (`flywheel status RUN | head -1`): the command
         stopped quietly, as a shell tool killed by SIGPIPE (128 + 13) does; never 1, which
         would read as a failed gate

`flywheel status RUN_ID` exits with the status of how the run stopped: 1 (its gate failed),
4 (a stage failed), 130 (interrupted by SIGINT, or killed: its lock has no live holder) or 143
(terminated by SIGTERM), after a line naming the stage, its error and the resume command.
"""

OK = 0
GATE_FAILED = 1
USER_ERROR = 2
LOCKED = 3
STAGE_FAILED = 4
VALIDATE_FAILED = 5
TIMED_OUT = 124  # an audit query past --timeout, stopped
INTERRUPTED = 130  # SIGINT (128 + the signal's number)
OUTPUT_CLOSED = 141  # SIGPIPE's number: stdout's reader went away (flows/cli.py `_Group`)
TERMINATED = 143  # SIGTERM

# `flywheel status`: the run's recorded status -> the exit status it reports
STATUS_EXIT = {"completed": OK, "running": OK, "gate_failed": GATE_FAILED,
               "failed": STAGE_FAILED, "interrupted": INTERRUPTED, "terminated": TERMINATED}
