"""The exit statuses of the `flywheel` command, one meaning each, for wrappers such as cron.

    0    success
    1    a data gate failed (the gate report is printed; `validate` exits 1 on a failed check)
    2    a user error: bad config or option, unknown run id, an unusable data root, catalog or
         model folder; nothing was written
    3    locked: another live process runs this run id, or holds the catalog
    4    a stage failed mid-run (one line names the stage, the cause and the log file with the
         traceback); `flywheel resume RUN_ID` continues once the cause is fixed
    130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM; `flywheel resume RUN_ID` continues
"""

OK = 0
GATE_FAILED = 1
USER_ERROR = 2
LOCKED = 3
STAGE_FAILED = 4
