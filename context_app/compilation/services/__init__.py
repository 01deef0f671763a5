"""The compile service's writes, one module per noun: compiles (``compiles``), queued compile requests
(``requests``), compaction folds (``folds``), replays (``replays``) and the usage ledger (``usage``);
beside them what a request carries (``request_inputs``) and what a compile is set to use
(``compile_settings``).
"""
