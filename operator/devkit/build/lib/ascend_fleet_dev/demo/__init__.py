"""``ascend-fleet dev``: the whole system on one machine, with a load story told live in the terminal."""
