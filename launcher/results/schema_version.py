"""The results table's schema version, in a module of its own: sweep.json records it when a sweep
is created, and that path (a `--detach` submission) does not load pandas."""

TABLE_SCHEMA_VERSION = 7  # 2: + repeat; 3: + variant, tp, pp, bubbles, collective time; 4: + cost to budget, model inputs;
# 5: + precision and the peak MFU used (value, source, mismatch note); 6: + each size's bootstrap intervals of
# tokens/s and efficiency (tokens_per_s_lo/hi, efficiency_lo/hi), flags (straggler rank, oversubscribed cores);
# 7: + hfu (hardware FLOPs utilisation: MFU with activation checkpointing's recompute counted)
