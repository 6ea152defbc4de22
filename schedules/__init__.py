"""Nightly self-improvement rounds on a Prefect server.

Each scheduled run of the `flywheel-nightly` flow continues one run id by one round from its
current incumbent: it reads how many rounds the catalog has decided, sets `rounds` to one more
and runs `flywheel_flow`, whose fingerprints skip every stage already done (a round that failed
the night before is finished first). `flywheel schedule serve|deploy|show` is the command line
(schedules/cli.py); `times.py` is cron arithmetic without Prefect.
"""
