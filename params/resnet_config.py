"""Every param a ResNet run reads, defined once: name, default, type, help and allowed values (the table).

Flags (``resnet/resnet_flags.py``), ``RESNET_CFG`` (the defaults dict), the checks of each value
(``validation.value_problems``) and ``--help`` are all generated from ``PARAMS``; ``merging.make_params`` makes a
run's params from what it is given; ``validation`` holds the rules between keys, and the components that take a
group of params check their own rules (``model_config.ModelConfig``, the augmentation and mixing configs), so that
each rule lives in one place. Values are the reference trainer's where we share a key. Deliberate differences:
- ``use_tpu`` None and ``strategy`` 'auto': the run picks TPU/GPUs/CPU itself; ``--use_tpu=false`` always runs
  locally, even with a TPU config.
- ``use_cache`` False: caching ImageNet needs ~150 GB of host RAM; the TPU config turns it on.
- ``lr_warmup_epochs`` counts real epochs (``num_train_images / train_batch_size`` steps each).
- ``num_parallel_calls`` -1 means tf.data AUTOTUNE.
Keys that only describe a run (model_dir, data_dir, eval_checkpoint, predict_input, the cluster, ...) live here
too, so that ``model_dir/params.yaml`` fully describes what ran.
"""
import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple

from params import architectures


@dataclasses.dataclass(frozen=True)
class Param:
  """One params key. ``type`` defaults to the default's type; ``checks`` are 'operator number' like '> 0'."""
  name: str
  default: Any
  help: str
  type: Optional[type] = None
  choices: Optional[Sequence[Any]] = None
  checks: Tuple[str, ...] = ()
  model: bool = False     # defines the model (its variables or their function): must match the run in model_dir
  words: Tuple[str, ...] = ()  # strings accepted besides values of ``type`` (e.g. 'balanced' for a list)
  modes: Tuple[str, ...] = ()  # the --mode values it acts in; () = every mode (see unused_in_mode)
  items: Optional['Param'] = None  # a list's items: their type, choices and checks (name and default unused)

  @property
  def value_type(self) -> type:
    return self.type or type(self.default)


P = Param
# Modes a param acts in (Param.modes).
TRAINING = ('train', 'train_and_eval')
EXPORTING = ('train', 'train_and_eval', 'export')
EVALUATING = ('train_and_eval', 'eval')
DEPTHS = architectures.SUPPORTED_DEPTHS
# The runner's names (resnet/estimator/run_config.py, which imports nothing of this package; a test keeps them equal).
STRATEGIES = ('auto', 'one_device', 'mirrored', 'multi_worker_mirrored', 'tpu')
PRECISIONS = ('float32', 'bfloat16', 'float16')
TFLITE_QUANTIZATIONS = ('float16', 'dynamic_int8', 'int8')  # resnet/export/tflite_export.QUANTIZATIONS (a test)
ONNX_QUANTIZATIONS = ('float16', 'int8')  # resnet/export/onnx_export.QUANTIZATIONS (a test)
OPTIMIZERS = ('momentum', 'adamw', 'lamb', 'muon')

PARAMS: Tuple[Param, ...] = (
    # --- model ---
    P('resnet_depth', 50, 'ResNet depth (10: the smallest, one block a group; 270-420: ResNet-RS).', choices=DEPTHS,
      model=True),
    P('num_label_classes', None, 'Width of the logits; unset = the class count in data_dir/summary.json, else '
      '1000. 1001 keeps the stored 1-based labels (class 0 = background).', int, checks=('> 0',), model=True),
    P('task', None, "'single_label' (one class per image: softmax) or 'multi_label' (any number of the classes "
      "per image: a sigmoid per class, mAP, tuned per-class thresholds); unset = the task in "
      "data_dir/summary.json, else single_label.", str, choices=(None, 'single_label', 'multi_label')),
    P('data_format', 'channels_last', 'Activation layout.', choices=('channels_last', 'channels_first'),
      model=True),
    P('pre_activation', False, 'ResNet v2 (pre-activation) blocks.', model=True),
    P('norm_act_layer', 'bn_relu', 'Normalisation + activation: batch norm + ReLU, or EvoNorm (needs '
      'pre_activation).', choices=architectures.NORM_ACT_LAYERS, model=True),
    P('se_ratio', None, 'Squeeze-excitation ratio in every block (ResNet-RS: 0.25); unset = off.', float,
      checks=('> 0', '<= 1'), model=True),
    P('resnetd_shortcut', False, 'ResNet-D: average-pool before the strided 1x1 projection shortcut.', model=True),
    P('use_resnetd_stem', False, 'ResNet-D stem: three 3x3 convolutions instead of one 7x7.', model=True),
    P('replace_stem_max_pool', False, 'A stride-2 3x3 convolution instead of the stem max pool.', model=True),
    # The Variant: how pretrained weights of other frameworks compute. Unset = from --resnet_checkpoint's weights
    # (or the run in model_dir), else the reference's v1.5 (variant_defaults).
    P('stride_in_1x1', None, "A stage's stride on the first 1x1 conv of its bottleneck, not on the 3x3 (ResNet v1, "
      "Keras applications' weights); unset = from the weights, else false.", bool, model=True),
    P('stem_pool_padding', None, "Stem max pool: 'same' (the reference; pads the end of even sizes) or "
      "'symmetric' (one pixel on every side: Keras, torchvision, timm); unset = from the weights, else 'same'.", str,
      choices=architectures.STEM_POOL_PADDINGS, model=True),
    P('input_normalization', None, "In-model normalisation of 0..255 RGB: 'imagenet' (mean/std, also torchvision's "
      "and timm's) or 'caffe_bgr' (RGB->BGR minus the caffe means, Keras applications' ResNet); unset = from the "
      "weights, else 'imagenet'.", str, choices=architectures.INPUT_NORMALIZATIONS, model=True),
    P('projection_shortcut', None, "'every_group' (the reference: a projection in every group's first block) or "
      "'shape_change' (only where shapes change: torchvision's ResNet-18/34 have none in group 1); unset = from "
      "the weights, else 'every_group'.", str, choices=architectures.PROJECTION_SHORTCUTS, model=True),
    P('drop_connect_rate', None, 'Stochastic depth: drop rate of block group 4; group g (1..4) uses '
      'rate * (g + 1) / 5. Training only; unset = off.', float,
      checks=('>= 0', '< 1')),
    P('bn_momentum', 0.9, 'Batch-norm moving-average momentum.', checks=('>= 0', '< 1')),
    P('bn_epsilon', None, 'Batch-norm epsilon; unset = from --resnet_checkpoint\'s weights (Keras applications: '
      '1.001e-5), else 1e-5.', float, checks=('> 0',), model=True),
    P('dropout_rate', None, 'Dropout before the classifier; unset or 0 = off.', float, checks=('>= 0', '< 1')),
    P('dropblock_groups', '', "Block groups (1..4) that use DropBlock, e.g. '3,4'; '' = off."),
    P('dropblock_keep_prob', None, 'Final DropBlock keep probability; required with dropblock_groups.', float,
      checks=('> 0', '<= 1')),
    P('dropblock_size', 7, 'DropBlock block size.', checks=('> 0',)),
    P('precision', 'bfloat16', 'Compute precision (float16 adds dynamic loss scaling; variables stay float32).',
      choices=PRECISIONS),
    P('jit_compile', False, 'XLA-compile each replica step of train, eval and predict (faster on GPU; slower on '
      'CPU; TPUs always compile).'),
    P('conv1x1_filter_grad', 'auto', "How 1x1 convs get their weight gradient: 'matmul' (one matmul, x^T dy), "
      "'conv' (TensorFlow's backward-weights convolution), 'auto' = matmul for bfloat16 on CPUs with AMX and for "
      'float32 on AVX-512 CPUs without AMX (measured faster there), else conv. The same gradient up to summation '
      'order; forward results do not change.',
      choices=('auto', 'matmul', 'conv'), modes=TRAINING),
    P('residual_add_relu', 'auto', "Each block's final relu(x + shortcut) in training: 'xla' (one XLA-compiled "
      "function), 'ops' (TensorFlow's Add and Relu), 'auto' = xla for bfloat16 on CPUs with AMX (measured faster "
      'there), else ops. The same results either way.', choices=('auto', 'xla', 'ops'), modes=TRAINING),
    # --- data ---
    P('data_dir', None, "Directory of train-*/validation-*/test-* TFRecords (local or gs://); unset or 'null' = "
      'synthetic data.', str),
    P('image_size', 224, 'Training crop size in pixels (and eval\'s, unless eval_image_size is set).',
      checks=('>= 32',), model=False),
    P('eval_image_size', None, 'Eval, predict and export image size; unset = image_size. Larger than image_size '
      'trains small and evaluates large (FixRes: train 176, eval 224); the model takes any size.', int,
      checks=('>= 32',)),
    P('train_size_schedule', None, "Progressive resizing (FFCV, timm's --train-size-schedule): training image sizes "
      'for equal shares of train_steps, in order, e.g. 128,160,224; the last must reach image_size (eval runs at '
      'eval_image_size, unset = image_size). A new compiled loop per size. Unset = image_size throughout.', list,
      modes=TRAINING, items=P('size', 224, '', int, checks=('>= 32',))),
    P('tta', 'none', "Test-time augmentation in eval and predict, the class probabilities averaged over the views "
      "(timm's --tta, torchvision's FiveCrop/TenCrop): flip = the image and its mirror image (2x the compute); "
      'five_crop = the centre and four corner crops of the centred square of the image resized to eval_image_size '
      '/ 0.875 (5x); ten_crop = those and their mirror images (10x). The exported SavedModel serves the single '
      'view.',
      choices=('none', 'flip', 'five_crop', 'ten_crop'), modes=('train_and_eval', 'eval', 'predict')),
    P('num_train_images', None, 'Training-set size (epochs, LR schedule); unset = from data_dir/summary.json, '
      'else ImageNet (1281167).', int, checks=('> 0',)),
    P('num_eval_images', None, 'Validation images to evaluate (the first N); unset = the whole split (from '
      'summary.json; 50000 for synthetic data).', int, checks=('> 0',)),
    P('num_test_images', None, 'Predict mode: how many images to predict; unset = all.', int, checks=('> 0',)),
    P('labels_file', None, 'Class names, one per line; unset = <data_dir>/labels.txt if present.', str),
    P('input_pipeline', 'optimized', "'optimized' or 'basic' (sequential reads and full decodes, for "
      'comparison).', choices=('optimized', 'basic')),
    P('synthetic_data', 'random', 'Synthetic input when data_dir is unset.', choices=('random', 'constant')),
    P('use_cache', False, 'Cache the training records in host RAM (ImageNet needs ~150 GB); each epoch '
      'reshuffles the cached blocks.'),
    P('shuffle_buffer_size', 1024, 'Shuffle buffer (records) of the training set.', checks=('>= 0',)),
    P('crop_area_range', [0.08, 1.0], 'Training random crop: [min, max] fraction of the image area. Raise the '
      'minimum (e.g. 0.35) when objects are small or classes differ by detail.', list),
    P('crop_aspect_ratio_range', [0.75, 1.33333], 'Training random crop: [min, max] width/height ratio.', list),
    P('random_flip', True, 'Random left-right flips in training (false for digits, text, or anything with a '
      'handedness).'),
    P('augment_name', None, "Extra training augmentation: 'autoaugment' (ImageNet policy v0), 'randaugment' or "
      "'trivialaugment_wide' (torchvision's ta_wide: one op per image, no knobs); unset = none.", str,
      choices=(None, 'autoaugment', 'randaugment', 'trivialaugment_wide')),
    P('randaug_num_layers', 2, 'RandAugment: ops applied per image (0 = none).'),
    P('randaug_magnitude', 10, 'RandAugment: op magnitude, 0..30.'),
    P('random_erase_prob', 0.0, "Random erasing (timm's --reprob, torchvision's --random-erase): with this probability "
      'a box of 2-33% of each training image, aspect 0.3-3.3, becomes pixel noise.', float,
      checks=('>= 0', '<= 1'), modes=TRAINING),
    P('num_parallel_calls', -1, 'Parallel decode/preprocess calls; -1 = tf.data AUTOTUNE.',
      checks=('>= -1', '!= 0')),
    P('fast_jpeg_decode', False, 'Training: decode JPEG crops at least twice image_size at 1/2, 1/4 or 1/8 DCT '
      'scale (never below image_size): ~16-20% less decode CPU on large photos, none on ImageNet-sized ones; '
      'pixels differ slightly (mean abs ~5 of 255). Eval and serving always decode exactly.'),
    P('fail_on_data_loss', False, 'Stop with an error when a TFRecord shard is truncated or corrupt, instead of '
      'skipping the lost records (always counted and logged).'),
    P('transpose_input', False, 'The reference infeed transpose (HWCN): TF2 TPUStrategy feeds NHWC batches '
      'directly, so only false is accepted.'),
    # --- optimisation ---
    P('train_batch_size', 1024, 'Global training batch size.', checks=('> 0',)),
    P('eval_batch_size', 1024, 'Global eval batch size.', checks=('> 0',), modes=EVALUATING),
    P('predict_batch_size', 256, 'Global predict batch size.', checks=('> 0',), modes=('predict',)),
    P('train_steps', 112590, 'Total training steps (also sets the LR and DropBlock schedules).', checks=('>= 0',)),
    P('base_learning_rate', 0.1, 'Learning rate for a global batch of 256, scaled linearly with the batch.',
      checks=('>= 0',), modes=TRAINING),
    P('lr_schedule', 'stepwise', "'stepwise' (x0.1 at 30, 60, 80 of 90 epochs' worth of train_steps), 'cosine' "
      "or 'exponential' (ramp-up, sustain, per-epoch decay).", choices=('stepwise', 'cosine', 'exponential'),
      modes=TRAINING),
    P('lr_warmup_epochs', 5.0, 'Stepwise/cosine: linear warm-up from 0, in epochs.', checks=('>= 0',), modes=TRAINING),
    P('lr_rampup_epochs', 5.0, 'Exponential schedule: epochs of linear ramp from lr_start to the peak.',
      checks=('>= 0',), modes=TRAINING),
    P('lr_sustain_epochs', 0.0, 'Exponential schedule: epochs held at the peak.', checks=('>= 0',), modes=TRAINING),
    P('lr_exp_decay', 0.8, 'Exponential schedule: decay factor per epoch after the sustain.', checks=('> 0',),
      modes=TRAINING),
    P('lr_start', 1e-5, 'Exponential schedule: first learning rate.', checks=('>= 0',), modes=TRAINING),
    P('lr_min', 1e-5, 'Exponential schedule: learning-rate floor.', checks=('>= 0',), modes=TRAINING),
    P('optimizer', 'momentum', "momentum: the reference's TF1 momentum SGD (enable_lars=true makes it LARS); adamw: "
      'torch.optim.AdamW (Adam with weight_decay decoupled: w -= lr * weight_decay * w on the L2 set, no L2 term in '
      'the loss; timm\'s fine-tuning default, where weight_decay is typically 0.01-0.05 and base_learning_rate '
      'about 1e-4); lamb: timm\'s Lamb (AdamW\'s step scaled per layer by |w|/|step|; \'ResNet strikes back\' A1/A2; '
      'timm\'s defaults are adam_epsilon=1e-6 clip_grad_norm=1.0 weight_decay_biases=false); muon: Keller Jordan\'s '
      'Muon on the conv kernels (each orthogonalised as a matrix [out, kh kw in]; base_learning_rate is Muon\'s, '
      'about 0.02 x 256 / train_batch_size for the reference\'s 0.02), AdamW on the rest (muon_adamw_lr_ratio). '
      'Training resumes only with the optimizer it started with.', choices=OPTIMIZERS),
    P('adam_beta1', 0.9, 'adamw, lamb, muon\'s AdamW: decay of the gradient\'s running mean.', float,
      checks=('>= 0', '< 1'), modes=TRAINING),
    P('adam_beta2', 0.999, 'adamw, lamb, muon\'s AdamW: decay of the squared gradient\'s running mean.', float,
      checks=('>= 0', '< 1'), modes=TRAINING),
    P('adam_epsilon', 1e-8, 'adamw, lamb, muon\'s AdamW: added to the bias-corrected root mean square.', float,
      checks=('> 0',), modes=TRAINING),
    P('muon_momentum', 0.95, 'muon: the momentum of its kernels (the reference\'s 0.95; use_nesterov applies).',
      float, checks=('>= 0', '< 1'), modes=TRAINING),
    P('muon_ns_steps', 5, 'muon: Newton-Schulz iterations per orthogonalisation (the reference\'s 5).',
      checks=('>= 1', '<= 20'), modes=TRAINING),
    P('muon_adamw_lr_ratio', 0.015, 'muon: the learning rate of the AdamW that updates the biases, normalisation '
      'and the classifier, as a share of the scheduled one (the reference\'s 3e-4 for Muon\'s 0.02: 0.015).',
      float, checks=('> 0',), modes=TRAINING),
    P('momentum', 0.9, 'SGD momentum.', checks=('>= 0', '< 1'), modes=TRAINING),
    P('use_nesterov', True, 'Nesterov momentum (the momentum optimizer only: LARS, as the reference, has none).',
      modes=TRAINING),
    P('weight_decay', 1e-4, 'L2 weight decay: wd * sum(w^2)/2 over non-normalisation variables.',
      checks=('>= 0',)),
    P('weight_decay_biases', True, 'Whether weight_decay covers the biases (the classifier\'s and squeeze-excitation '
      'convs\'), as the reference; false: kernels only (timm\'s default; normalisation is never decayed). LARS '
      'always skips biases.'),
    P('clip_grad_norm', 0.0, '> 0: clip the global norm of each update\'s gradients to this value (torchvision '
      '--clip-grad-norm, timm --clip-grad): the gradients summed over every replica and micro-batch, unscaled '
      'from float16 loss scaling, as the optimizer applies them (after head-only and layer-decay scaling).',
      float, checks=('>= 0',), modes=TRAINING),
    P('label_smoothing', 0.0, 'Label smoothing.', checks=('>= 0', '< 1')),
    P('loss', None, "The training loss: 'softmax_cross_entropy', or 'binary_cross_entropy' (timm's --bce-loss, "
      "'ResNet strikes back': a sigmoid per class against the one-hot or multi-hot targets, averaged over the "
      'classes); eval reports the same loss. Unset = binary_cross_entropy for multi-label data (task), else '
      'softmax_cross_entropy.', str, choices=(None, 'softmax_cross_entropy', 'binary_cross_entropy')),
    P('teacher_checkpoint', None, 'Knowledge distillation: a teacher ResNet, anything resnet_checkpoint reads (a '
      'finished run, a reference TF1 checkpoint, Keras/torchvision/timm weights), any depth, the same classes; it '
      'never trains. Unset = no distillation.', str, modes=TRAINING),
    P('teacher_resnet_depth', None, "The teacher's depth where its source does not say it (a reference TF1 "
      'checkpoint); unset = from its params.yaml or weights file.', int, choices=(None, *DEPTHS), modes=TRAINING),
    P('distill_weight', 0.5, "Distillation: the soft (teacher) term's share of the loss, (1 - w) x task + w x "
      'T^2 x KL(teacher || student).', float, checks=('>= 0', '<= 1'), modes=TRAINING),
    P('distill_temperature', 1.0, 'Distillation: the softmax temperature T of both teacher and student in the '
      'soft term.', float, checks=('> 0',), modes=TRAINING),
    P('bce_target_threshold', None, "binary_cross_entropy only (timm's --bce-target-thresh, e.g. 0.2): targets "
      'above it become 1 and the rest 0, after label smoothing and mixup/CutMix; unset = soft targets.', float,
      checks=('> 0', '< 1')),
    P('freeze_batch_norm', False, 'Fine-tuning: batch norm in inference mode while training (its moving statistics '
      'stay those of the checkpoint; gamma and beta still learn), for batches too small for good statistics.',
      modes=TRAINING),
    P('train_head_only_steps', 0, 'Fine-tuning: train only the classifier head for the first N steps (the '
      'backbone gets no update), then everything.', checks=('>= 0',), modes=TRAINING),
    P('layer_decay', None, "Fine-tuning: layer-wise learning-rate decay per stage (timm's --layer-decay): the "
      'head learns at the full rate, block group g at layer_decay**(5-g), the stem at layer_decay**5; unset = off.',
      float, checks=('> 0', '<= 1'), modes=TRAINING),
    P('class_weights', None, "Weight of each class in the training loss: 'balanced' (n_images / (n_classes x "
      "n_class) from data_dir/summary.json's train counts) or a list, one per model class; unset = all 1. Eval "
      'is unweighted.', list, words=('balanced',), modes=TRAINING, items=P('weight', 1.0, '', float, checks=('>= 0',))),
    P('class_weight_normalization', 'batch_size', "How the class-weighted loss is averaged: 'batch_size' = "
      "sum(w x CE) / global batch (Keras fit's sample weights), 'weight_sum' = sum(w x CE) / sum(w) over the global "
      "batch (PyTorch's CrossEntropyLoss(weight=...)). Without class_weights both are the mean.",
      choices=('batch_size', 'weight_sum'), modes=TRAINING),
    P('mixup_alpha', 0.0, 'Mixup: each training batch blended with itself reversed, by lambda ~ Beta(a, a) '
      '(e.g. 0.2); 0 = off.', modes=TRAINING),
    P('cutmix_alpha', 0.0, 'CutMix: a box of the reversed batch pasted in, area ~ Beta(a, a) (e.g. 1.0); 0 = off. '
      'With mixup too, one of them per batch (mix_switch_prob).', modes=TRAINING),
    P('mix_prob', 1.0, 'Mixup/CutMix: probability that a batch is mixed at all.', modes=TRAINING),
    P('mix_switch_prob', 0.5, 'With both mixup and CutMix on: probability of CutMix for a batch.',
      modes=TRAINING),
    P('gradient_accumulation_steps', 1, 'Split each replica\'s batch into this many micro-batches, run one after '
      'another, and apply their summed gradients once: train_batch_size stays the batch of one update, memory '
      'is that of one micro-batch. Batch norm normalises each micro-batch.', checks=('>= 1',), modes=TRAINING),
    P('enable_lars', False, 'LARS optimizer with its warm-up + polynomial-decay schedule (batches of 8k and up).'),
    P('poly_rate', 0.0, 'LARS: peak learning rate; 0 = by batch size (10 below 16k, 25 below 32k, ...). The '
      'decay after the warm-up is always quadratic.', checks=('>= 0',), modes=TRAINING),
    P('moving_average_decay', None, 'Keep an exponential moving average of the weights with this decay '
      '(e.g. 0.9999); eval uses it; unset = off.', float, checks=('> 0', '< 1')),
    P('export_moving_average', False, 'Export the moving-average weights instead of the trained ones.',
      modes=EXPORTING),
    P('random_seed', None, 'Seed for weights, input order and augmentation. Set: bit-identical runs on the same '
      'machine (deterministic ops, slower). Unset: fast and nondeterministic.', int),
    # --- devices and cluster ---
    P('strategy', 'auto', 'tf.distribute strategy; auto = TPU if given, several GPUs, multi-worker TF_CONFIG, '
      'else one device.', choices=STRATEGIES),
    P('use_tpu', None, 'true: run on a TPU (strategy tpu); false: never, even with a TPU config; unset: follow '
      'strategy.', bool),
    P('tpu', None, 'TPU name or address, e.g. grpc://10.0.0.2:8470.', str),
    P('gcp_project', None, 'GCP project of the TPU (for the cluster resolver).', str),
    P('tpu_zone', None, 'GCE zone of the TPU (for the cluster resolver).', str),
    P('num_cores', None, 'TPU cores; checked against the TPU replica count when set.', int, checks=('> 0',)),
    P('worker_hosts', None, 'Multi-worker: host:port of every worker, comma-separated (writes TF_CONFIG unless '
      'it is set).', str),
    P('task_index', 0, 'Multi-worker: index of this worker in worker_hosts.', checks=('>= 0',)),
    # --- loop, checkpoints, summaries ---
    P('model_dir', None, 'Checkpoints, summaries, profiles and params.yaml (local or gs://); training resumes '
      'from it.', str),
    P('iterations_per_loop', 1251, 'Steps per compiled loop: one host round trip, one summary point.',
      checks=('> 0',)),
    P('steps_per_eval', 1251, 'train_and_eval: training steps between evaluations.', checks=('> 0',),
      modes=('train_and_eval',)),
    P('save_checkpoints_steps', None, 'Checkpoint interval in steps; unset = max(5000, iterations_per_loop).',
      int, checks=('> 0',)),
    P('keep_checkpoint_max', 5, 'Checkpoints to keep.', checks=('> 0',)),
    P('skip_train_summaries', False, 'Turn off the per-loop TensorBoard training scalars (the reference\'s '
      'skip_host_call, still accepted).'),
    P('per_class_max_classes', 4096, 'Eval: per-class precision/recall/F1 and a confusion matrix for up to this '
      'many classes (a [C, C] sum per eval step); 0 = off.', checks=('>= 0',)),
    P('max_misclassified_rows', 1000, 'Eval: list at most this many misclassified images (the most confident) '
      'in model_dir/<eval>_misclassified.csv; 0 = no list.', checks=('>= 0',)),
    P('best_metric', None, 'Eval metric that picks model_dir/best/ (train_and_eval and continuous eval), e.g. '
      'loss or macro_f1; unset = mAP for multi-label data (task), else top_1_accuracy.', str, modes=EVALUATING),
    P('best_metric_goal', 'auto', "Whether best_metric is better 'max' or 'min'; auto = min for losses and "
      'errors, max otherwise.', choices=('auto', 'max', 'min'), modes=EVALUATING),
    P('keep_best_checkpoint', True, 'Keep a copy of the best checkpoint by best_metric in model_dir/best/ (also '
      'kept when early_stopping_evals or export_best need it; never '
      'deleted by keep_checkpoint_max).', modes=EVALUATING),
    P('early_stopping_evals', 0, 'train_and_eval: stop after this many evaluations in a row without improvement '
      'of best_metric; 0 = off.', checks=('>= 0',), modes=('train_and_eval',)),
    P('eval_timeout', None, 'Eval mode: seconds to wait for a new checkpoint; unset = forever.', int,
      checks=('>= 0',), modes=('eval',)),
    P('eval_checkpoint', None, 'Eval mode: evaluate this one checkpoint (prefix or directory) once and exit.',
      str, modes=('eval',)),
    P('stop_on_nan', True, 'Stop training when the loss becomes NaN or Inf.', modes=TRAINING),
    P('on_divergence', 'stop', 'When the training cross-entropy, smoothed over 50+ steps after the warm-up, '
      'explodes (3x that of a uniform guess under the class weights, or back above it after reaching half of it) '
      'or the model collapses to a constant output, at 2 checks in a row: stop (an error, no export; checkpoints '
      'kept), warn, or off.', choices=('stop', 'warn', 'off'), modes=TRAINING),
    # --- warm start, export, predict ---
    P('resnet_checkpoint', None, 'Warm start from this checkpoint (prefix or directory), e.g. ImageNet weights '
      'for fine-tuning; applies to a new model_dir only.', str),
    P('allow_partial_warm_start', False, 'Warm start even when some backbone variables are missing from the '
      'checkpoint or differ in shape (they keep their initial values).'),
    P('export_dir', None, 'Export a SavedModel here after training.', str, modes=EXPORTING),
    P('export_best', False, 'Export the best checkpoint (model_dir/best/) instead of the last one.',
      modes=('train_and_eval', 'export')),
    P('export_tflite', False, 'Also write model.tflite (float32, batch 1) into the export, checked against the '
      'SavedModel.', modes=EXPORTING),
    P('tflite_quantizations', [], 'Also write quantized .tflite files (model.tflite too): any of float16, '
      'dynamic_int8 (int8 weights), int8 (full integer, calibrated on training images). Each is measured on '
      'validation images against the SavedModel (tflite_report.txt) and refused below deploy_min_agreement.', list,
      modes=EXPORTING, items=P('quantization', '', '', str, choices=TFLITE_QUANTIZATIONS)),
    P('tflite_int8_io', False, 'int8 .tflite: int8 input and output tensors (the Edge TPU compiler needs them).',
      modes=EXPORTING),
    P('tflite_float_fallback', False, 'int8 .tflite: ops without an int8 kernel run in float (else such a model is '
      'refused); not for the Edge TPU.', modes=EXPORTING),
    P('export_onnx', False, 'Also write model.onnx (float32; images [batch, S, S, 3] 0..255 in, probabilities and '
      'classes out) into the export, checked with ONNX Runtime against the SavedModel and measured on the run\'s '
      'validation images (onnx_report.txt). Needs pip install -e ".[onnx]".', modes=EXPORTING),
    P('onnx_quantizations', [], 'Also write quantized .onnx files (model.onnx too): float16 (for GPUs), int8 '
      '(static, calibrated on training images); each measured like the .tflite files and refused below '
      'deploy_min_agreement.', list, modes=EXPORTING,
      items=P('quantization', '', '', str, choices=ONNX_QUANTIZATIONS)),
    P('onnx_opset', 17, 'ONNX opset of the exported files.', checks=('>= 13', '<= 18'), modes=EXPORTING),
    # The deployed files of either format (.tflite, .onnx): calibrated and measured alike.
    P('deploy_calibration_images', 300, 'int8 .tflite and .onnx files: training images (eval preprocessing) that '
      'calibrate activations (formerly tflite_calibration_images, still accepted).', checks=('> 0',),
      modes=EXPORTING),
    P('deploy_eval_images', 500, 'Validation images each .tflite and .onnx file is measured on (score, agreement '
      'with the SavedModel, latency; formerly tflite_eval_images, still accepted).', checks=('> 0',), modes=EXPORTING),
    P('deploy_min_agreement', 0.9, 'A quantized .tflite or .onnx file whose answers (top-1 agreement; '
      'multi-label: the Jaccard index of its positive labels) agree with the SavedModel\'s on a smaller share of '
      'those images is not written, and the export fails (formerly tflite_min_agreement, still accepted).', float,
      checks=('>= 0', '<= 1'), modes=EXPORTING),
    P('deploy_min_class_agreement', 0.5, 'The same per class: a quantized .tflite or .onnx file is not written '
      'where, for some class, of the images it or the SavedModel puts in the class, a smaller share are put there '
      'by both (the class\'s Jaccard index; a file that loses a rare class passes the pooled one). Only classes '
      'either decides for 10 images or more are judged (fewer: one flip scores 0).', float,
      checks=('>= 0', '<= 1'), modes=EXPORTING),
    P('add_warmup_requests', False, 'Write TF Serving warm-up requests into the export (assets.extra).',
      modes=EXPORTING),
    P('inference_batch_sizes', [8], 'Batch sizes of the TF Serving warm-up requests.', list, modes=EXPORTING,
      items=P('batch size', 1, '', int, checks=('> 0',))),
    P('model_name', 'resnet', 'Model name in the TF Serving warm-up requests.', modes=EXPORTING),
    P('predict_input', None, 'Predict mode: image files to classify instead of test-* records: a folder (its image '
      'files, recursively), a glob, a file, or several, comma-separated; each normalised as the converter does '
      '(EXIF orientation, alpha on white, RGB).', str, modes=('predict',)),
    P('predict_output', None, 'Predict mode: CSV to write; unset = model_dir/predictions.csv.', str,
      modes=('predict',)),
    P('predict_top_k', 5, 'Predict mode: classes reported per image.', checks=('> 0',), modes=('predict',)),
    P('predict_tflite', None, 'Predict mode: run this .tflite file with LiteRT instead of model_dir\'s checkpoint '
      '(the same CSV and per-class report).', str, modes=('predict',)),
    P('predict_onnx', None, 'Predict mode: run this .onnx file with ONNX Runtime instead of model_dir\'s '
      'checkpoint (the same CSV and per-class report).', str, modes=('predict',)),
    # --- profiling ---
    P('profile_every_n_steps', 0, '> 0: capture a profile every N steps.', checks=('>= 0',)),
    P('profile_duration_ms', 1000, 'Milliseconds per periodic profile capture, on any device (the reference\'s '
      'tpu_profile_duration, still accepted).', checks=('> 0',)),
    P('profile_steps', '', "'A,B': one profile capture of steps A..B."),
    P('profiler_port', 0, '> 0: start a profiler server on this port (listens on all interfaces).',
      checks=('>= 0', '<= 65535')),
)

PARAMS_BY_NAME: Dict[str, Param] = {p.name: p for p in PARAMS}
RESNET_CFG: Dict[str, Any] = {p.name: p.default for p in PARAMS}
# Old names of renamed params (the reference's, and ours) -> the names. Accepted as flags, in every override and
# config file, and in a run's params.yaml.
ALIASES: Dict[str, str] = {
    'skip_host_call': 'skip_train_summaries', 'tpu_profile_duration': 'profile_duration_ms',
    # Ours, renamed when the .onnx files came to share them (a run's params.yaml may hold them).
    'tflite_calibration_images': 'deploy_calibration_images', 'tflite_eval_images': 'deploy_eval_images',
    'tflite_min_agreement': 'deploy_min_agreement',
}
# Params whose change makes a checkpoint of model_dir unusable: compared against model_dir/params.yaml.
MODEL_PARAMS: Tuple[str, ...] = tuple(p.name for p in PARAMS if p.model)

# Defaults that depend on the data: what unset keys become when data_dir has no summary.json (ImageNet's).
IMAGENET_COUNTS = {'num_label_classes': 1000, 'num_train_images': 1281167}
SYNTHETIC_EVAL_IMAGES = 50000

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configs')


def unused_in_mode(keys: Sequence[str], mode: str) -> list:
  """A message for each of ``keys`` (params the user gave) that does nothing in ``mode``, from Param.modes."""
  out = []
  for key in keys:
    param = PARAMS_BY_NAME.get(ALIASES.get(key, key))
    if param is not None and param.modes and mode not in param.modes:
      out.append(f'{param.name} does nothing in --mode={mode} (it acts in --mode={"/".join(param.modes)})')
  return out
