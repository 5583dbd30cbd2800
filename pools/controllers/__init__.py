"""The loops: reconcile (lifecycle, exits, state), autoscale, schedule and repair, each claimed per pool so any number of workers can run them."""
