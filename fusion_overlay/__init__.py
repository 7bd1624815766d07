"""The inductor fusion overlay's installer: apply, verify, revert and status
of the patch set on a torch tree of a supported release (``fusion-overlay`` or
``python -m fusion_overlay``), and the registry of its flags.

From a checkout it reads the checkout's ``patches/`` and ``overlay/``; an
installed copy (``pip install git+<repo>`` or ``pip install .``) carries
them as package data.
"""
