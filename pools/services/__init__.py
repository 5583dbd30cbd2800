"""Writes: each change of a pool, order, pod or repair approval, with its event and audit entry."""
