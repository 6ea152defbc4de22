"""The audit: a read-only snapshot of a run (snapshot), the named queries over it (queries,
custom_queries, round_metrics, operations), row and checkpoint lineage (lineage,
checkpoint_lineage, training_plan) and the HTML report (report, svg). These read only storage."""
