"""The node agent API (`/api/agent/v1/`): join, reports, commands, and the simulated cloud's fault feed."""
