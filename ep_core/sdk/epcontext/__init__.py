"""EPContext helpers for EPs: the node schema, reading payloads from a context model, the staged
output being written, and the workspace of a weight-sharing group."""
