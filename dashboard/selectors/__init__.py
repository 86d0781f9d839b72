"""Reads for the operator dashboard, one module per page: overview, live, runs, sessions, audit."""
