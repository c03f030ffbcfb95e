"""What a run tells people and tools: the case report, the run's JSON, traces, plog files, time
attribution and the HTML report. Nothing here imports torch."""
