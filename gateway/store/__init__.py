"""Storage: the database and its migrations, accounts and keys, the usage ledger and its meter,
usage reports, token counting. Imports core only."""
