"""The names of a converted dataset's files and the rules of what goes in, shared by the converter
(``tools/imagenet_to_gcs.py``, whose worker processes must not load TensorFlow) and the readers: pure Python."""

LABELS_FILE = 'labels.txt'      # class names, one per line, in label order
SUMMARY_FILE = 'summary.json'   # images per split and class, skipped files, per-shard counts, sizes and hashes
# Images whose shorter side is below this are not converted: the trainer's eval crop is int(0.875 x the shorter
# side), which is empty below 2 px, so such an image (a spacer GIF, a tracking pixel) fails to decode in every epoch.
MIN_IMAGE_SIDE = 2
