"""One module per lifecycle; each step a small idempotent function over Meta + Store."""
