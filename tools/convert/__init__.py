"""The dataset converter's parts, one job each; ``python tools/imagenet_to_gcs.py`` is its command line.

Imports nothing: the image-cleaning worker processes import ``tools.convert.clean_images``, and with it this file,
and must not load TensorFlow (each would cost ~1 GB and seconds to start).
"""
