"""``onnxruntime.transformers``: only ``io_binding_helper.TypeHelper``, the type tables that
inference code imports from here (Hugging Face optimum's ``ORTModel``, and with it
sentence-transformers' ONNX backend). The rest of onnxruntime's package (its transformer graph
optimizer, fusions and benchmarks) rewrites graphs into onnxruntime's com.microsoft fused ops and
drives its CUDA kernels: optimize with the real onnxruntime, then run the model here;
``import onnxruntime.transformers.optimizer`` and the like raise ``ModuleNotFoundError``."""
