"""Per-trial records → one table (parquet + CSV); scaling, cost, policies and the recommendation;
tables measured elsewhere."""
