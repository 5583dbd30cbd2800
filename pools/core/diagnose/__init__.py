"""The self-checks of a pool: what they read (snapshot) and the checks themselves."""
