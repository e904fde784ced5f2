"""Packaging for the Estimator-style ResNet trainer (TensorFlow 2.21, Keras 3)."""
from setuptools import find_packages, setup

setup(
    name="resnet-estimator",
    version="0.1.0",
    description="Estimator-style ResNet training on tf.distribute: CPU, GPU, multi-worker and TPU.",
    python_requires=">=3.10",
    packages=find_packages(include=["resnet", "resnet.*", "official_input", "official_input.*",
                                    "params", "params.*", "tools", "tools.*"]),
    package_data={"params": ["configs/*.yaml"]},
    install_requires=[
        # tensorflow-cpu and tensorflow (GPU) are interchangeable; pick one with the extras below.
        "tensorflow-cpu>=2.21,<2.22; platform_machine != 'aarch64'",
        # 2.21 no longer pulls TensorBoard in: list it, and the profile plugin (xprof) for the profile tab.
        "tensorboard>=2.21,<2.22",
        "tensorboard-plugin-profile>=2.21",
        "absl-py>=2.1",
        "numpy>=1.26,<3",
        "pyyaml>=6.0",
        # Pillow: the dataset converter re-encodes PNG/CMYK/grayscale/misnamed images to RGB JPEG in worker
        # processes that must not import TensorFlow (see README, "Dependencies").
        "pillow>=10",
        # safetensors: reads torchvision/timm weights (--resnet_checkpoint) into numpy, without torch.
        "safetensors>=0.4",
    ],
    extras_require={
        # pytest-xdist: `make test` runs two test files at a time (--dist loadfile keeps each file's shared runs
        # in one process); most tests wait on TF start-up and single-threaded tracing, so 2 cores do twice the work.
        # ai-edge-litert: LiteRT's own runtime, which checks every exported .tflite (the export falls back to
        # TensorFlow's interpreter without it, and says so).
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ai-edge-litert>=2.0"],
        # ONNX export (--export_onnx, onnx_quantizations) and --predict_onnx only; training never imports them.
        # tf2onnx converts the model, onnx reads and edits the file, onnxruntime runs every file before it is
        # written and quantizes (float16, static int8). Tested: tf2onnx 1.17.0, onnx 1.23.2, onnxruntime 1.32.0
        # with TensorFlow 2.21 and numpy 2.4.
        "onnx": ["tf2onnx>=1.17", "onnx>=1.17", "onnxruntime>=1.20"],
        # Parquet and Arrow sources for the converter (Hugging Face `datasets` files, `save_to_disk` folders) only:
        # pyarrow is the one reader of both formats (tensorflow-io's stalled); training never imports it.
        "parquet": ["pyarrow>=15"],
        # tools/sweep.py only: Optuna's samplers, pruners and its SQLite storage (several workers share one sweep).
        "sweep": ["optuna>=4"],
    },
    entry_points={
        "console_scripts": [
            "resnet-main=resnet.resnet_main:run_main",
            "resnet-convert=tools.imagenet_to_gcs:run_main",
            "resnet-fake-imagenet=tools.make_fake_imagenet:run_main",
            "resnet-demo-dataset=tools.make_demo_dataset:run_main",
            "resnet-demo=tools.demo:run_main",
            "resnet-input-benchmark=tools.input_benchmark:run_main",
            "resnet-train-benchmark=tools.train_benchmark:run_main",
            "resnet-capture-profile=tools.capture_profile:run_main",
            "resnet-profile-report=tools.profile_report:run_main",
            "resnet-model-report=tools.model_report:run_main",
            "resnet-average-checkpoints=tools.average_checkpoints:run_main",
        ],
    },
)
