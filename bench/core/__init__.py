"""The bottom layer: errors, units, random streams, the machine and the environment
allow-list. Imports nothing else of the project; everything may import it."""
