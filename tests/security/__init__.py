"""Security suites (issue 11): hostile models under time and memory limits, bounded loading."""
