"""Task modules imported by ``pgq worker -A …`` subprocesses in the end-to-end tests."""
