"""The evaluation report in every form a door shows it: Markdown and flat numbers for the Dagster
UI (`metadata`), plain text and the JSON payload of `kb eval` (`text`, `payload`), one
self-contained HTML page with hand-drawn SVG plots (`page`, `plots`; `kb eval --report`), all
from the rows of `tables`.

Nothing here loads from outside the file: no scripts, fonts, images or style sheets by URL.
"""
