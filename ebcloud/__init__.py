"""`ebcloud`: the command-line client of the GPU node pool control plane (design §4).

A plain REST client of `/api/v1/`: it never imports Django, so it installs and runs anywhere.
"""

__version__ = "0.1.0"
