"""The kube-scheduler model: nodes and filters, score policies, one placement, the incremental cluster scheduler, explanations, preemption, fragmentation and repack."""
