"""From records to tables: the frame of runs (one row each, and the one filter of
usable launches), the shared derived figures, the comparison's sections (throughput,
per rank, accuracy, head to head, decided, noise, start-up, where the step goes and
its verdict), knobs, cost, tuning, regressions and bus bandwidth. No rendering here:
bench/render/ turns these tables into text, Markdown, CSV, JSON and HTML."""
