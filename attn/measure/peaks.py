"""Published peaks of the GPUs the course knows: one table, used by the benchmark and the GPU suite alike.

These are specifications, not measurements: dense (no sparsity) bf16 tensor-core TFLOP/s, which the
data sheets print as half their "with sparsity" figure; float32 TFLOP/s (the CUDA cores, no tensor
cores: what PyTorch's math backend runs on when it upcasts 16-bit inputs, with TF32 off as PyTorch
leaves it); and HBM bandwidth in TB/s.
"""

DATA_SHEET_SOURCE = (
    "NVIDIA H100 Tensor Core GPU data sheet (H100 SXM, H100 PCIe and H100 NVL columns) and NVIDIA H200 Tensor Core "
    "GPU data sheet (H200 SXM and H200 NVL columns): BF16 Tensor Core with sparsity, halved for dense; FP32; GPU "
    "memory bandwidth. NVIDIA A100 Tensor Core GPU data sheet: BF16 Tensor Core 312 TFLOPS dense, FP32 19.5 TFLOPS; "
    "its bandwidth differs by model (40 GB, 80 GB PCIe, 80 GB SXM), so none is assumed"
)

DATA_SHEET_PEAKS = {  # the more specific names first: "H100 PCIe" must not match plain "H100"
    "H100 PCIe": {"bf16_dense_tflops": 756.0, "fp32_tflops": 51.0, "hbm_tb_per_s": 2.0},
    "H100 NVL": {"bf16_dense_tflops": 835.0, "fp32_tflops": 60.0, "hbm_tb_per_s": 3.9},
    "H200 NVL": {"bf16_dense_tflops": 835.0, "fp32_tflops": 60.0, "hbm_tb_per_s": 4.8},
    "H100": {"bf16_dense_tflops": 989.0, "fp32_tflops": 67.0, "hbm_tb_per_s": 3.35},  # SXM
    "H200": {"bf16_dense_tflops": 989.0, "fp32_tflops": 67.0, "hbm_tb_per_s": 4.8},  # SXM
    "A100": {"bf16_dense_tflops": 312.0, "fp32_tflops": 19.5, "hbm_tb_per_s": None},  # bandwidth: depends on the model
}


def data_sheet_peaks(device_name):
    """The data-sheet peaks of a GPU name, {"name", "bf16_dense_tflops", "fp32_tflops", "hbm_tb_per_s"}, or None if unknown."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a GPU's name as text, such as 'NVIDIA H100 80GB HBM3', "
                        f"got {type(device_name).__name__}")
    for name, peaks in DATA_SHEET_PEAKS.items():
        if all(part in device_name for part in name.split()):
            return {"name": name, **peaks}
    return None
