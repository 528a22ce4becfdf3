"""The EPContext cache: generate ``_ctx.onnx`` models, load them, share weights, and check
compiled models against the EPs that will run them."""
