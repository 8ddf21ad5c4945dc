"""How scores become verdicts: the gates a marker declares (:mod:`.gates`), a sample's outcome and the verdict
rule (:mod:`.results`), the outcome's wire form (:mod:`.wire`) and the intervals (:mod:`.stats`). No pytest."""
