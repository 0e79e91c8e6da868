"""The sandbox: copy-on-write workspaces, the command router, R2E-Gym tools and sessions."""
