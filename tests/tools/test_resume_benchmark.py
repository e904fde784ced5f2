"""Tests for tools/resume_benchmark.py's checkpoint row on a tiny model: what it reports, not how fast (timings go
in the tool's output, never in a test)."""
import re

from tools import resume_benchmark


def test_the_checkpoint_row_reports_size_save_and_restore_before_and_with_the_input_state():
  """ResNet-10 at 32 px with stochastic depth (random streams to save): every figure is there, both checkpoints
  were read back (the tool checks the restored step), and the added entries are named."""
  line, = resume_benchmark.checkpoint_rows(2, models=(('tiny', dict(resnet_depth=10, image_size=32,
                                                                    num_label_classes=4, drop_connect_rate=0.2)),))
  found = re.fullmatch(r'tiny +before: +([\d.]+) MB, save +([\d.]+) s, restore +([\d.]+) s +now: +([\d.]+) MB '
                       r'\(\+(\d+) bytes: ([^;]+); (\d+) random streams\), save +([\d.]+) s, restore +([\d.]+) s',
                       line)
  assert found, line
  before_mb, now_mb, added = float(found.group(1)), float(found.group(4)), int(found.group(5))
  assert before_mb > 1 and now_mb >= before_mb and added > 0
  assert {'input_seed', 'input_layout', 'random_streams'} <= set(found.group(6).split(', '))
  assert int(found.group(7)) > 0
  assert all(float(found.group(i)) >= 0 for i in (2, 3, 8, 9))
