"""The ``pgq`` command line, installed as ``pgqueue.cli``.

A thin layer over :class:`pgqueue.Queue`: every command parses its options, calls the same
library API a Python user (or the dashboard) would, and prints the result. No SQL lives here.
"""
