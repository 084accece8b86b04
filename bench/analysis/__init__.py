"""From records to answers: the frame of runs, comparison tables, rendering (text,
Markdown, CSV, JSON, HTML), BASE/NEW regressions, the scaling model and exports."""
