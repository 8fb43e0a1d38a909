"""Oracles: functions that judge kernel outputs.  numoracle's own check is the
rounding-interval check over acceptance regions; baselines (fixed
tolerances) live beside it for comparison."""
