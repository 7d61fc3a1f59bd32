"""The performance model: step time from compute, communication, overlap and the pipeline bubble
(step, comm, overlap, shapes, links), memory per GPU (memory), its fit to measured trials and
calibration (fit, fit_links, calibrate, preset_fit), and `launcher plan` (plan, plan_table)."""
