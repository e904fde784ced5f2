"""The names of a converted dataset's files, shared by the converter (``tools/imagenet_to_gcs.py``, whose worker
processes must not load TensorFlow) and the readers: pure Python."""

LABELS_FILE = 'labels.txt'      # class names, one per line, in label order
SUMMARY_FILE = 'summary.json'   # images per split and class, skipped files, per-shard counts, sizes and hashes
