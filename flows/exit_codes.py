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
    130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM; `flywheel resume RUN_ID` continues

`flywheel status RUN_ID` exits with the status of how the run stopped: 1 (its gate failed),
4 (a stage failed) or 130 (interrupted, or killed: its lock has no live holder), after a line
naming the stage, its error and the resume command.
"""

OK = 0
GATE_FAILED = 1
USER_ERROR = 2
LOCKED = 3
STAGE_FAILED = 4
VALIDATE_FAILED = 5
INTERRUPTED = 130  # SIGINT; a SIGTERM ends a run with 143 (128 + the signal's number)

# `flywheel status`: the run's recorded status -> the exit status it reports
STATUS_EXIT = {"completed": OK, "running": OK, "gate_failed": GATE_FAILED,
               "failed": STAGE_FAILED, "interrupted": INTERRUPTED}
