"""The book's own machinery: plots (viz), numbers as printed (typeset), the reproductions ledger
(ledger), committed long-run results (results), data sets (data)."""
