"""Samples and where they come from: the ``Sample`` model and the JSONL reader (:mod:`.samples`), one module per
samples format under :mod:`.formats` (JSONL, Parquet / Arrow, ``datasets`` directories, slime packs) and their
registry, field mappings (:mod:`.fields`), and :mod:`.sources`, which reads any of them. No pytest."""
