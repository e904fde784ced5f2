"""The process environment TensorFlow reads when it is imported: set before the program imports it.

- TF_CPP_MIN_LOG_LEVEL=2: TensorFlow's C++ INFO and WARNING lines (start-up banner, graph-optimizer notes such as
  'Skipping loop optimization') name internals a user cannot act on. Errors stay, and so do the input pipeline's
  own warnings (written to stderr directly). TF_CPP_MIN_LOG_LEVEL=0 shows all.
- TF_ENABLE_ONEDNN_OPTS=1: TensorFlow turns oneDNN kernels on by itself only on CPUs with AVX-512 VNNI/BF16 or AMX.
  On AVX2-only CPUs (many laptops and older servers) training runs ~5x slower without them
  (--config_file=small_data, ResNet-18 at 64 px, batch 64: 19 vs 104 img/s on a 2-core AVX2 EPYC) and
  channels_first convolutions fail to run. TF_ENABLE_ONEDNN_OPTS=0 turns them off.
A value the user set wins.
"""
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
