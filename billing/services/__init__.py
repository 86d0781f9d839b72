"""The billing app's writes: holds on the request path and the worker's slices, the ledger,
rate limits."""
