"""Samples and where they come from: the ``Sample`` model and the JSONL reader (:mod:`.samples`), Parquet / Arrow /
``datasets`` directories, field mappings and trainers' dumps (:mod:`.sources`). No pytest."""
