"""Scheduler-side decisions of the C++ backend: which nodes fuse, in what loop order."""
