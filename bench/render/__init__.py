"""Tables into what users read: text that fits the terminal (`textfit`), Markdown, CSV
and JSON (`formats`), the HTML page (`html`) and its plots (`plots`), and the
pytest-benchmark export (`export`)."""
