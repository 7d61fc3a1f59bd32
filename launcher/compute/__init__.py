"""What a device can do and what a model's step asks of it: the device peak table and the
precision it implies (peaks), the analytic FLOP formulas (flops) and FLOPs counted on the meta
device (flop_count). Below both the payload (train/) and the planner (perf/), which read them."""
