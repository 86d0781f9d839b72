"""Money: prices and costs, budgets and their holds, the ledger, and rate limits."""
