"""Small subprocess scripts and process utilities for the multi-process tests (not collected by pytest)."""
