"""The audit: a read-only snapshot of a run (snapshot), the named queries over it (queries),
row lineage (lineage) and the HTML report (report, svg). These read only storage."""
