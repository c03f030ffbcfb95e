"""The pipeline: the one place the stages are chained (:mod:`.chain`), and programs built by hand."""
