"""The numeric claims hold in both kernel modes: the suite runs them with TensorFlow's default kernels (as users
run, unseeded), and this test runs them again in a subprocess with deterministic ops, which every random_seed turns
on and which swap kernels (e.g. softmax cross-entropy's). docs/training.md, "Seeded and unseeded runs use different
kernels", lists them."""
import os
import re
import subprocess
import sys

import pytest
from resnet import determinism
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

ROOT = procs.ROOT
# One test of each numeric claim (docs/training.md lists them): the default-mode suite runs every case; here each
# claim runs once through the kernels deterministic ops swap (softmax cross-entropy, segment sums, the input
# pipeline's order). The target kinds (one-hot, smoothed, weighted, mixed) differ in values, not kernels: a
# weight-sum case, weighted + mixed ones (softmax, BCE, multi-hot) and the CPU-kernel case on 2 replicas, and float16
# loss scaling. Gradient clipping (reductions and a scale, no kernel the mode swaps) runs in the default mode only.
GRADIENTS = 'tests/resnet/training/test_loss_gradients.py::'
NUMERIC_CLAIMS = (
    GRADIENTS + 'test_the_loss_gradient_is_right_for_targets_that_do_not_sum_to_one',
    GRADIENTS + 'test_two_replica_step_gradient_equals_the_hand_formulation[cpu_kernels]',
    GRADIENTS + 'test_two_replica_step_gradient_equals_the_hand_formulation[weighted_weight_sum]',
    GRADIENTS + 'test_float16_loss_scaled_step_gradient_equals_the_hand_formulation[weighted]',
    GRADIENTS + 'test_two_replica_step_gradient_equals_the_hand_formulation[bce_weighted_mixed]',
    GRADIENTS + 'test_two_replica_step_gradient_equals_the_hand_formulation[multi_label_weighted_mixed]',
    GRADIENTS + 'test_clip_grad_norm_clips_the_loss_gradient_and_adds_the_weight_decay_after[2-float16]',
    # Multi-label eval's score histograms: a segment sum, a kernel deterministic ops swap.
    'tests/resnet/task/test_multi_label.py::test_eval_sums_are_the_score_histograms_and_metrics_are_exact_counts',
    'tests/resnet/training/test_distillation.py::test_one_step_gradient_is_the_distillation_formula[2]',
    'tests/resnet/model/test_cpu_kernels.py::test_matmul_filter_grad_equals_the_convolution_gradient',  # bf16's CPU kernels
    'tests/resnet/model/test_cpu_kernels.py::test_bfloat16_matmul_gradient_is_as_accurate_as_the_convolution',
    'tests/resnet/model/test_cpu_kernels.py::test_residual_add_relu_compiles_in_training_only_and_equals_the_ops',
    'tests/resnet/training/test_recipe.py::test_accumulated_micro_batches_make_the_same_update_as_one_batch[2]',
    'tests/resnet/training/test_recipe.py::test_mixup_and_cutmix_change_the_update_and_stay_seeded',
    'tests/resnet/training/test_resnet_model_fn.py::test_class_weighted_loss_equals_the_hand_computed_one[2]',
    'tests/resnet/training/test_resnet_model_fn.py::test_class_weights_with_mixup_weigh_each_source_of_a_mixed_example',
    'tests/resnet/training/test_scale_float16.py::test_one_replica_overflowing_skips_the_step_on_every_replica[2]',
    'tests/resnet/training/test_fine_tuning.py::test_head_only_steps_leave_the_backbone_untouched',
    'tests/resnet/training/test_fine_tuning.py::test_layer_decay_scales_each_stage_update',
    'tests/resnet/weights/test_foreign_weights.py::test_torchvision_parity[18]',
)  # Keras-file and ResNet-50 parity run in the default mode only: the same kernels as ResNet-18's, minutes more.


def test_the_suite_runs_the_default_kernels():
  assert not determinism.op_determinism_enabled()


def test_numeric_claims_hold_with_deterministic_ops(tmp_path):
  env = dict(os.environ, RESNET_TEST_DETERMINISTIC_OPS='1')
  env.pop('PYTEST_XDIST_WORKER', None)
  proc = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-o', 'addopts=',
                         '--basetemp', str(tmp_path / 'basetemp'), *NUMERIC_CLAIMS],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
  tail = proc.stdout[-3000:] + proc.stderr[-2000:]
  assert proc.returncode == 0, tail
  passed = re.search(r'(\d+) passed', proc.stdout)
  last = proc.stdout.splitlines()[-1]
  assert passed and int(passed.group(1)) >= len(NUMERIC_CLAIMS) and 'skipped' not in last, tail
